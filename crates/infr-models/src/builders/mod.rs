//! Shared graph builders: the pieces every transformer family is made of.

mod attention;
mod delta_net;
mod ffn;
mod moe;

pub use attention::{load_attention, AttnConfig, AttnWeights};
pub use delta_net::{load_delta_net, DeltaNetHparams, DeltaNetLayer};
pub use ffn::{load_gated_ffn, GatedFfn};
pub use moe::{load_moe, Ffn, MoeFfn, MoeHparams, MoeStyle};

/// Name of a per-layer tensor, `blk.{il}.{name}`.
pub fn blk(il: usize, name: &str) -> String {
    format!("blk.{il}.{name}")
}

use infr_core::{GraphBuilder, KvLayerSpec, RopeMode, RopeParams, RopeScaling, TensorId, WeightId, WeightSource};

use crate::{Hparams, ModelError, RopeScalingType};

/// Which layers use the sliding window: the `sliding_window_pattern` array if present, else
/// every layer but each `n`-th (`llama_hparams::set_swa_pattern`; each family has its own
/// default `n`: 6 for Gemma 3, 2 for gpt-oss).
pub fn swa_layers(hp: &Hparams, src: &dyn WeightSource, default_n: usize) -> Result<Vec<bool>, ModelError> {
    let keys = hp.keys(src.metadata());
    if let Some(v) = keys.bool_array("attention.sliding_window_pattern").ok().flatten() {
        if v.len() != hp.n_layer {
            return Err(ModelError::BadHparam("sliding_window_pattern length differs from block_count".into()));
        }
        return Ok(v);
    }
    let n = keys.u("attention.sliding_window_pattern")?.unwrap_or(default_n);
    Ok((0..hp.n_layer).map(|il| n == 0 || il % n < n - 1).collect())
}

/// One KV cache layer per model layer, with the common head counts and sizes; `window(il)` is
/// how many positions layer `il` sees, if limited (sliding window, or a chunk).
pub fn uniform_kv_layers(hp: &Hparams, window: impl Fn(usize) -> Option<u32>) -> Vec<KvLayerSpec> {
    (0..hp.n_layer)
        .map(|il| KvLayerSpec {
            n_kv_head: hp.n_head_kv[il] as u32,
            head_dim_k: hp.head_dim_k as u32,
            head_dim_v: hp.head_dim_v as u32,
            window: window(il),
        })
        .collect()
}

/// The head on the last hidden state: keep the output rows, final RMS norm, output
/// projection; returns the logits.
pub fn build_logits(g: &mut GraphBuilder<'_>, head: &OutputHead, x: TensorId, eps: f32, n_embd: usize) -> TensorId {
    g.set_label("output");
    let x = g.output_rows(x);
    let h = g.rms_norm(x, Some(head.output_norm), eps, n_embd);
    g.linear(h, head.output, None)
}

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
