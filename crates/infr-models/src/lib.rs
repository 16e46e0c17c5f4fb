//! Model architectures.
//!
//! Each family lives in its own file with three parts — read hyper-parameters from the GGUF
//! metadata, name and shape-check its tensors, and build its layer graph from the shared
//! builders in [`builders`]. The registry in [`registry`] maps `general.architecture` to a
//! loader; adding an architecture is one file plus one line there.

pub mod builders;
mod diffusion_gemma;
mod error;
mod gemma3;
mod gemma4;
mod gpt_oss;
mod hparams;
mod llama;
mod llama4;
mod model;
mod qwen2;
mod qwen3;
mod qwen35;
mod qwen3moe;
mod registry;
pub mod synth;
mod tensors;

pub use error::ModelError;
pub use hparams::{Hparams, RopeScalingType};
pub use model::{Architecture, DiffusionParams, Model, ModelInfo};
pub use registry::{load_model, supported_architectures};
pub use tensors::{ModelWeights, TensorLoader};
