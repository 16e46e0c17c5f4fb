//! Llama 4 (Scout / Maverick text stack): pre-norm llama layers where every
//! `interleave_moe_layer_step`-th FFN is a mixture of experts (sigmoid router, the weight
//! scaling the expert's input, plus an ungated shared expert); chunked attention with RoPE on
//! three layers of four and global NoPE layers whose queries get attention temperature
//! tuning; a weightless RMS ("L2") norm of Q and K after RoPE. Mirrors llama.cpp
//! `src/models/llama4.cpp`.

use infr_core::{
    Activation, AttnParams, GraphBuilder, KvLayerSpec, MoeGating, RopeMode, RopeParams, TempScaleParams, WeightSource,
};

use crate::builders::{self, blk, AttnWeights, Ffn, MoeHparams, MoeStyle, OutputHead};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// Chunk size of the chunked layers (fixed in llama.cpp when the file has no sliding window).
const CHUNK: u32 = 8192;
/// Attention temperature of the NoPE layers (`n_attn_temp_floor_scale`, `f_attn_temp_scale`,
/// `f_attn_temp_offset`).
const TEMP: TempScaleParams = TempScaleParams { floor_scale: 8192, scale: 0.1, offset: 1.0 };
/// Experts of Llama 4 Maverick, the one variant without the Q/K norm.
const MAVERICK_EXPERTS: usize = 128;

#[derive(Debug)]
struct Layer {
    attn_norm: infr_core::WeightId,
    attn: AttnWeights,
    ffn_norm: infr_core::WeightId,
    ffn: Ffn,
    /// RoPE parameters, or `None` for a NoPE layer.
    rope: Option<RopeParams>,
    chunk: Option<u32>,
}

#[derive(Debug)]
struct Llama4 {
    head: OutputHead,
    layers: Vec<Layer>,
    eps: f32,
    n_embd: usize,
    n_head: u32,
    n_kv_head: u32,
    head_dim: u32,
    kq_scale: f32,
    kq_norm: bool,
    temp: Option<TempScaleParams>,
    kv: Vec<KvLayerSpec>,
}

/// Loader for `general.architecture = llama4`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    hp.require_heads()?;
    if hp.head_dim_k != hp.head_dim_v || hp.n_rot != hp.head_dim_k {
        return Err(ModelError::BadHparam("llama4 needs equal K/V head sizes and full rotation".into()));
    }
    let keys = hp.keys(src.metadata());
    let mut mh = MoeHparams::read(hp, src)?;
    mh.n_ff_shexp = mh.n_ff_exp.clone();
    let moe_step = keys.req_u("interleave_moe_layer_step")?;
    // A file that says `sliding_window = 0` has all-global layers, RoPE on all but the last and
    // no temperature tuning; otherwise chunks of 8192 on all but every `period`-th layer.
    let (chunked, no_rope_step, temp) = match keys.u("attention.sliding_window")? {
        Some(0) => (vec![false; hp.n_layer], hp.n_layer, None),
        _ => {
            let period = keys.u("attention.sliding_window_pattern")?.unwrap_or(4).max(1);
            ((0..hp.n_layer).map(|il| il % period < period - 1).collect(), 4, Some(TEMP))
        }
    };
    let base_swa = keys.f("rope.freq_base_swa")?.unwrap_or(hp.rope_freq_base);
    let head = builders::load_output_head(tl, hp)?;
    let freq_factors = tl.optional("rope_freqs.weight", &[hp.n_rot / 2])?;
    let kq_scale = keys.f("attention.scale")?.filter(|&s| s != 0.0).unwrap_or(1.0 / (hp.head_dim_k as f32).sqrt());
    let style = MoeStyle {
        gating: MoeGating::Sigmoid,
        renorm: false,
        weight_before: true,
        act: Activation::Silu,
        shared: true,
        shared_gated: false,
    };
    let mut layers = Vec::with_capacity(hp.n_layer);
    for il in 0..hp.n_layer {
        let use_rope = (il + 1) % no_rope_step != 0;
        let base = if chunked[il] { base_swa } else { hp.rope_freq_base };
        let is_moe = moe_step > 0 && (il + 1) % moe_step == 0;
        layers.push(Layer {
            attn_norm: tl.require(&blk(il, "attn_norm.weight"), &[hp.n_embd])?,
            attn: builders::load_attention(tl, hp, il, false)?,
            ffn_norm: tl.require(&blk(il, "ffn_norm.weight"), &[hp.n_embd])?,
            ffn: if is_moe {
                Ffn::Moe(builders::load_moe(tl, hp, &mh, il, style)?)
            } else {
                Ffn::Dense(builders::load_gated_ffn(tl, hp, il, Activation::Silu)?)
            },
            rope: use_rope.then(|| builders::rope_params(hp, RopeMode::Normal, base, hp.rope_freq_scale, freq_factors)),
            chunk: chunked[il].then_some(CHUNK),
        });
    }
    // A chunked layer sees at most its chunk.
    let kv = builders::uniform_kv_layers(hp, |il| layers[il].chunk);
    Ok(Box::new(Llama4 {
        head,
        layers,
        eps: hp.rms_eps,
        n_embd: hp.n_embd,
        n_head: hp.n_head[0] as u32,
        n_kv_head: hp.n_head_kv[0] as u32,
        head_dim: hp.head_dim_k as u32,
        kq_scale,
        kq_norm: mh.n_expert != MAVERICK_EXPERTS,
        temp,
        kv,
    }))
}

impl Architecture for Llama4 {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        let (e, d) = (self.n_embd, self.head_dim as usize);
        let mut x = g.embed(self.head.tok_embd);
        for (il, l) in self.layers.iter().enumerate() {
            g.set_label(format!("blk.{il}"));
            let h = g.rms_norm(x, Some(l.attn_norm), self.eps, e);
            let a = &l.attn;
            let mut q = g.linear(h, a.wq, a.bq);
            let mut k = g.linear(h, a.wk, a.bk);
            let v = g.linear(h, a.wv, a.bv);
            match l.rope {
                Some(rope) => {
                    q = g.rope(q, rope);
                    k = g.rope(k, rope);
                    if self.kq_norm {
                        q = g.rms_norm(q, None, self.eps, d);
                        k = g.rms_norm(k, None, self.eps, d);
                    }
                }
                None => {
                    if let Some(t) = self.temp {
                        q = g.temp_scale(q, t);
                    }
                }
            }
            let params = AttnParams {
                kv_layer: il as u32,
                n_head: self.n_head,
                n_kv_head: self.n_kv_head,
                head_dim_k: self.head_dim,
                head_dim_v: self.head_dim,
                scale: self.kq_scale,
                softcap: None,
                window: None,
                chunk: l.chunk,
                sinks: None,
                write_kv: true,
                bidirectional: false,
            };
            let att = g.attention(q, k, v, params);
            let att = g.linear(att, a.wo, a.bo);
            x = g.add(x, att);
            let h = g.rms_norm(x, Some(l.ffn_norm), self.eps, e);
            let f = l.ffn.build(g, h);
            x = g.add(x, f);
        }
        builders::build_logits(g, &self.head, x, self.eps, e);
    }

    fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.kv.clone()
    }
}
