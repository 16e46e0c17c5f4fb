//! The Vulkan compute backend: `ash` for the driver, WGSL kernels compiled to SPIR-V by `naga`.
//!
//! Layers, bottom up: [`device`] (instance, capabilities, logical device), [`memory`]
//! (buffers, uploads), [`pipeline`] (WGSL → SPIR-V → pipelines, disk cache), [`repack`]
//! (ggml blocks → GPU planes), [`kernels`] (kernel specs and push constants), `plan` (a graph
//! recorded into one command buffer), [`profile`] (timestamp queries) and [`VulkanBackend`].

#![warn(missing_docs)]

mod attn_kernels;
mod backend;
mod coop_kernels;
pub mod device;
mod error;
mod expert_cache;
mod features;
mod fused_kernels;
mod fusion;
mod gemv_q8;
mod kernels;
mod lower;
pub mod memory;
mod moe_kernels;
pub mod pipeline;
mod plan;
mod pool;
mod prefill_matmul;
pub mod profile;
mod recurrent_kernels;
pub mod repack;
mod skinny_matmul;
mod tables;
mod weights;

pub use backend::{VulkanBackend, VulkanOptions};
pub use device::{list_device_caps, list_devices, CoopMatShape, DeviceCaps};
pub use error::VkError;
