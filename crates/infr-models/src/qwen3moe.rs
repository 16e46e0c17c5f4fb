//! Qwen3-MoE: the Qwen3 layer with every FFN a mixture of experts — softmax router, top-k,
//! chosen weights renormalised, SwiGLU experts, no shared expert (llama.cpp
//! `src/models/qwen3moe.cpp`).

use infr_core::{Activation, MoeGating, RopeMode, WeightSource};

use crate::builders::MoeStyle;
use crate::llama::{load_dense, DenseOptions};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// Loader for `general.architecture = qwen3moe`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    let style = MoeStyle {
        gating: MoeGating::Softmax,
        renorm: true,
        weight_before: false,
        act: Activation::Silu,
        shared: false,
        shared_gated: false,
    };
    let opt = DenseOptions { rope_mode: RopeMode::Neox, qk_norm: true, moe: Some(style) };
    Ok(Box::new(load_dense(hp, src, tl, opt)?))
}
