//! Gemma 3: embeddings scaled by `sqrt(n_embd)`, per-head Q/K norms, sandwich norms around
//! attention and FFN, GeGLU, sliding-window layers (5 of every 6 by default) with their own RoPE
//! base. Norm weights are stored with the `+1` already applied (llama.cpp's converter does it),
//! so they are used as-is. Mirrors llama.cpp `src/models/gemma3.cpp`.

use infr_core::{Activation, GraphBuilder, KvLayerSpec, RopeMode, WeightId, WeightSource};

use crate::builders::{self, blk, AttnConfig, AttnWeights, GatedFfn, OutputHead};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: WeightId,
    attn: AttnWeights,
    attn_post_norm: WeightId,
    ffn_norm: WeightId,
    ffn: GatedFfn,
    ffn_post_norm: WeightId,
    cfg: AttnConfig,
}

#[derive(Debug)]
struct Gemma3 {
    head: OutputHead,
    layers: Vec<Layer>,
    eps: f32,
    n_embd: usize,
    final_softcap: Option<f32>,
    kv: Vec<KvLayerSpec>,
}

/// Loader for `general.architecture = gemma3`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    hp.require_heads()?;
    let keys = hp.keys(src.metadata());
    let window = keys.u("attention.sliding_window")?.filter(|&w| w > 0);
    let is_swa = match window {
        Some(_) => builders::swa_layers(hp, src, 6)?,
        None => vec![false; hp.n_layer],
    };
    let base_swa = keys.f("rope.freq_base_swa")?.unwrap_or(10000.0);
    let final_softcap = keys.f("final_logit_softcapping")?.filter(|&c| c != 0.0);
    // gemma_pytorch config: the 27B model scales queries by 1/sqrt(n_embd / n_head).
    let q_scale = if hp.n_layer == 62 {
        1.0 / ((hp.n_embd / hp.n_head[0]) as f32).sqrt()
    } else {
        1.0 / (hp.head_dim_k as f32).sqrt()
    };
    let head = builders::load_output_head(tl, hp)?;
    let e = hp.n_embd;
    let mut layers = Vec::with_capacity(hp.n_layer);
    let mut kv = Vec::with_capacity(hp.n_layer);
    for il in 0..hp.n_layer {
        let (base, scale) = if is_swa[il] { (base_swa, 1.0) } else { (hp.rope_freq_base, hp.rope_freq_scale) };
        let cfg = AttnConfig {
            n_head: hp.n_head[il] as u32,
            n_kv_head: hp.n_head_kv[il] as u32,
            head_dim: hp.head_dim_k as u32,
            rope: builders::rope_params(hp, RopeMode::Neox, base, scale, None),
            q_scale: Some(q_scale),
            kq_scale: 1.0,
            softcap: None,
            window: if is_swa[il] { window.map(|w| w as u32) } else { None },
            sinks: None,
            norm_eps: hp.rms_eps,
            kv_layer: il as u32,
        };
        kv.push(KvLayerSpec {
            n_kv_head: cfg.n_kv_head,
            head_dim_k: cfg.head_dim,
            head_dim_v: hp.head_dim_v as u32,
            window: cfg.window,
        });
        layers.push(Layer {
            attn_norm: tl.require(&blk(il, "attn_norm.weight"), &[e])?,
            attn: builders::load_attention(tl, hp, il, true)?,
            attn_post_norm: tl.require(&blk(il, "post_attention_norm.weight"), &[e])?,
            ffn_norm: tl.require(&blk(il, "ffn_norm.weight"), &[e])?,
            ffn: builders::load_gated_ffn(tl, hp, il, Activation::GeluTanh)?,
            ffn_post_norm: tl.require(&blk(il, "post_ffw_norm.weight"), &[e])?,
            cfg,
        });
    }
    Ok(Box::new(Gemma3 { head, layers, eps: hp.rms_eps, n_embd: e, final_softcap, kv }))
}

impl Architecture for Gemma3 {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        let e = self.n_embd;
        let x = g.embed(self.head.tok_embd);
        let mut x = g.scale(x, (e as f32).sqrt());
        for (il, l) in self.layers.iter().enumerate() {
            g.set_label(format!("blk.{il}"));
            let h = g.rms_norm(x, Some(l.attn_norm), self.eps, e);
            let a = l.attn.build(g, h, &l.cfg);
            let a = g.rms_norm(a, Some(l.attn_post_norm), self.eps, e);
            x = g.add(a, x);
            let h = g.rms_norm(x, Some(l.ffn_norm), self.eps, e);
            let f = l.ffn.build(g, h);
            let f = g.rms_norm(f, Some(l.ffn_post_norm), self.eps, e);
            x = g.add(f, x);
        }
        let logits = builders::build_logits(g, &self.head, x, self.eps, e);
        if let Some(cap) = self.final_softcap {
            g.softcap(logits, cap);
        }
    }

    fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.kv.clone()
    }
}
