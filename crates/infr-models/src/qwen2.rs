//! Qwen2 / Qwen2.5: the llama layer with Q/K/V biases and NeoX RoPE
//! (llama.cpp `src/models/qwen2.cpp`).

use infr_core::{RopeMode, WeightSource};

use crate::llama::{load_dense, DenseOptions};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// Loader for `general.architecture = qwen2`. The biases are picked up by the shared
/// attention loader (`attn_{q,k,v}.bias`).
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    Ok(Box::new(load_dense(hp, src, tl, DenseOptions { rope_mode: RopeMode::Neox, qk_norm: false, moe: None })?))
}
