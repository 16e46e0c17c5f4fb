//! Self-attention: Q/K/V projections (optional biases and per-head norms), RoPE, attention
//! over the KV cache, output projection — `build_qkv` + `build_attn` in llama.cpp.

use infr_core::{AttnParams, GraphBuilder, RopeParams, TensorId, WeightId};

use super::blk;
use crate::{Hparams, ModelError, TensorLoader};

/// The tensors of one attention block.
#[derive(Debug, Clone, Copy)]
pub struct AttnWeights {
    pub wq: WeightId,
    pub wk: WeightId,
    pub wv: WeightId,
    pub wo: WeightId,
    pub bq: Option<WeightId>,
    pub bk: Option<WeightId>,
    pub bv: Option<WeightId>,
    pub bo: Option<WeightId>,
    /// Per-head RMS norm weights applied to Q and K before RoPE (Qwen3, Gemma 3).
    pub q_norm: Option<WeightId>,
    pub k_norm: Option<WeightId>,
}

/// Load `blk.{il}.attn_{q,k,v,output}` (+ biases, + q/k norms if `qk_norm`).
pub fn load_attention(
    tl: &mut TensorLoader<'_>,
    hp: &Hparams,
    il: usize,
    qk_norm: bool,
) -> Result<AttnWeights, ModelError> {
    let (e, h, hkv) = (hp.n_embd, hp.n_head[il], hp.n_head_kv[il]);
    let (dk, dv) = (hp.head_dim_k, hp.head_dim_v);
    let norm = |tl: &mut TensorLoader<'_>, n: &str| -> Result<Option<WeightId>, ModelError> {
        if qk_norm {
            tl.require(&blk(il, n), &[dk]).map(Some)
        } else {
            Ok(None)
        }
    };
    Ok(AttnWeights {
        wq: tl.require(&blk(il, "attn_q.weight"), &[e, h * dk])?,
        wk: tl.require(&blk(il, "attn_k.weight"), &[e, hkv * dk])?,
        wv: tl.require(&blk(il, "attn_v.weight"), &[e, hkv * dv])?,
        wo: tl.require(&blk(il, "attn_output.weight"), &[h * dv, e])?,
        bq: tl.optional(&blk(il, "attn_q.bias"), &[h * dk])?,
        bk: tl.optional(&blk(il, "attn_k.bias"), &[hkv * dk])?,
        bv: tl.optional(&blk(il, "attn_v.bias"), &[hkv * dv])?,
        bo: tl.optional(&blk(il, "attn_output.bias"), &[e])?,
        q_norm: norm(tl, "attn_q_norm.weight")?,
        k_norm: norm(tl, "attn_k_norm.weight")?,
    })
}

/// How one attention block computes.
#[derive(Debug, Clone, Copy)]
pub struct AttnConfig {
    pub n_head: u32,
    pub n_kv_head: u32,
    pub head_dim: u32,
    pub rope: RopeParams,
    /// Multiplier applied to Q as a separate op before attention (Gemma), if any.
    pub q_scale: Option<f32>,
    /// Scale of `q·k` inside attention.
    pub kq_scale: f32,
    pub softcap: Option<f32>,
    pub window: Option<u32>,
    /// Per-head attention sinks (gpt-oss), if any.
    pub sinks: Option<WeightId>,
    /// Epsilon of the per-head norms.
    pub norm_eps: f32,
    pub kv_layer: u32,
}

impl AttnWeights {
    /// Build the block on normalised input `x`; returns the projected output.
    pub fn build(&self, g: &mut GraphBuilder<'_>, x: TensorId, c: &AttnConfig) -> TensorId {
        let d = c.head_dim as usize;
        let mut q = g.linear(x, self.wq, self.bq);
        let mut k = g.linear(x, self.wk, self.bk);
        let v = g.linear(x, self.wv, self.bv);
        if let Some(w) = self.q_norm {
            q = g.rms_norm(q, Some(w), c.norm_eps, d);
        }
        if let Some(w) = self.k_norm {
            k = g.rms_norm(k, Some(w), c.norm_eps, d);
        }
        q = g.rope(q, c.rope);
        k = g.rope(k, c.rope);
        if let Some(s) = c.q_scale {
            q = g.scale(q, s);
        }
        let params = AttnParams {
            kv_layer: c.kv_layer,
            n_head: c.n_head,
            n_kv_head: c.n_kv_head,
            head_dim_k: c.head_dim,
            head_dim_v: c.head_dim,
            scale: c.kq_scale,
            softcap: c.softcap,
            window: c.window,
            chunk: None,
            sinks: c.sinks,
            write_kv: true,
            bidirectional: false,
        };
        let a = g.attention(q, k, v, params);
        g.linear(a, self.wo, self.bo)
    }
}
