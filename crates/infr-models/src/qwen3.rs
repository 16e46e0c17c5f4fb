//! Qwen3 (dense): the llama layer with per-head RMS norms on Q and K before RoPE, NeoX RoPE
//! and no Q/K/V biases (llama.cpp `src/models/qwen3.cpp`).

use infr_core::{RopeMode, WeightSource};

use crate::llama::{load_dense, DenseOptions};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// Loader for `general.architecture = qwen3`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    Ok(Box::new(load_dense(hp, src, tl, DenseOptions { rope_mode: RopeMode::Neox, qk_norm: true, moe: None })?))
}
