//! Shared graph builders: the pieces every transformer family is made of.

mod attention;
mod ffn;
mod moe;

pub use attention::{load_attention, AttnConfig, AttnWeights};
pub use ffn::{load_gated_ffn, GatedFfn};
pub use moe::{load_moe, Ffn, MoeFfn, MoeHparams, MoeStyle};

/// Name of a per-layer tensor, `blk.{il}.{name}`.
pub fn blk(il: usize, name: &str) -> String {
    format!("blk.{il}.{name}")
}

use infr_core::{RopeMode, RopeParams, RopeScaling, WeightId};

use crate::{Hparams, RopeScalingType};

/// RoPE parameters from the common hyper-parameters (`ggml_rope_ext` arguments as llama.cpp's
/// context sets them: YaRN gets `ext_factor = 1`, `beta_fast = 32`, `beta_slow = 1`).
pub fn rope_params(
    hp: &Hparams,
    mode: RopeMode,
    freq_base: f32,
    freq_scale: f32,
    freq_factors: Option<WeightId>,
) -> RopeParams {
    let scaling = match hp.rope_scaling {
        RopeScalingType::Yarn => RopeScaling::Yarn {
            ext_factor: 1.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
            n_ctx_orig: hp.n_ctx_orig_yarn as u32,
        },
        _ => RopeScaling::None,
    };
    RopeParams {
        mode,
        head_dim: hp.head_dim_k as u32,
        n_rot: hp.n_rot as u32,
        freq_base,
        freq_scale,
        scaling,
        freq_factors,
    }
}

/// Token embedding, final norm and output head (tied to the embedding when `output.weight`
/// is absent).
#[derive(Debug, Clone, Copy)]
pub struct OutputHead {
    pub tok_embd: WeightId,
    pub output_norm: WeightId,
    pub output: WeightId,
}

/// Load `token_embd`, `output_norm` and `output` (or tie it).
pub fn load_output_head(tl: &mut crate::TensorLoader<'_>, hp: &Hparams) -> Result<OutputHead, crate::ModelError> {
    let (e, v) = (hp.n_embd, hp.n_vocab);
    let tok_embd = tl.require("token_embd.weight", &[e, v])?;
    let output_norm = tl.require("output_norm.weight", &[e])?;
    let output = tl.optional("output.weight", &[e, v])?.unwrap_or(tok_embd);
    Ok(OutputHead { tok_embd, output_norm, output })
}
