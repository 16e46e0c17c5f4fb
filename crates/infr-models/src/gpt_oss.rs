//! gpt-oss (OpenAI's open-weight MoE): pre-norm layers alternating sliding-window and
//! global attention with per-head attention sinks, biased Q/K/V/O projections, NeoX RoPE
//! with YaRN, and a mixture-of-experts FFN on every layer (biased router and experts,
//! softmax over the chosen experts' logits, the clamped SwiGLU). Mirrors llama.cpp
//! `src/models/openai-moe.cpp` (architecture `gpt-oss`).

use infr_core::{Activation, ExpertGateUp, GraphBuilder, KvLayerSpec, MoeGating, RopeMode};
use infr_core::{WeightId, WeightSource};

use crate::builders::{self, blk, AttnConfig, AttnWeights, MoeFfn, MoeHparams, MoeStyle, OutputHead};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

#[derive(Debug)]
struct Layer {
    attn_norm: WeightId,
    attn: AttnWeights,
    cfg: AttnConfig,
    post_attn_norm: WeightId,
    router_bias: WeightId,
    moe: MoeFfn,
}

#[derive(Debug)]
struct GptOss {
    head: OutputHead,
    layers: Vec<Layer>,
    eps: f32,
    n_embd: usize,
    kv: Vec<KvLayerSpec>,
}

/// Loader for `general.architecture = gpt-oss`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    hp.require_heads()?;
    if hp.head_dim_k != hp.head_dim_v || hp.n_rot != hp.head_dim_k {
        return Err(ModelError::BadHparam("gpt-oss needs equal K/V head sizes and full rotation".into()));
    }
    let keys = hp.keys(src.metadata());
    let window = keys.req_u("attention.sliding_window")?;
    if window == 0 {
        return Err(ModelError::BadHparam(format!("{} = 0", keys.name("attention.sliding_window"))));
    }
    let swa = builders::swa_layers(hp, src, 2)?;
    let base_swa = keys.f("rope.freq_base_swa")?.unwrap_or(hp.rope_freq_base);
    let mh = MoeHparams::read(hp, src)?;
    let head = builders::load_output_head(tl, hp)?;
    let style = MoeStyle {
        gating: MoeGating::SoftmaxChosen,
        renorm: false,
        weight_before: false,
        act: Activation::SwigluOai,
        shared: false,
        shared_gated: false,
    };
    let (e, ne) = (hp.n_embd, mh.n_expert);
    let mut layers = Vec::with_capacity(hp.n_layer);
    for il in 0..hp.n_layer {
        let ff = mh.n_ff_exp[il];
        let mut moe = builders::load_moe(tl, hp, &mh, il, style)?;
        let bias = |tl: &mut TensorLoader<'_>, name: &str, rows: usize| tl.require(&blk(il, name), &[rows, ne]);
        moe.params.gate_up_bias = Some(match moe.params.gate_up {
            ExpertGateUp::Separate { .. } => ExpertGateUp::Separate {
                gate: bias(tl, "ffn_gate_exps.bias", ff)?,
                up: bias(tl, "ffn_up_exps.bias", ff)?,
            },
            ExpertGateUp::Fused(_) => ExpertGateUp::Fused(bias(tl, "ffn_gate_up_exps.bias", 2 * ff)?),
        });
        moe.params.down_bias = Some(bias(tl, "ffn_down_exps.bias", e)?);
        let base = if swa[il] { base_swa } else { hp.rope_freq_base };
        let cfg = AttnConfig {
            n_head: hp.n_head[il] as u32,
            n_kv_head: hp.n_head_kv[il] as u32,
            head_dim: hp.head_dim_k as u32,
            rope: builders::rope_params(hp, RopeMode::Neox, base, hp.rope_freq_scale, None),
            q_scale: None,
            kq_scale: 1.0 / (hp.head_dim_k as f32).sqrt(),
            softcap: None,
            window: swa[il].then_some(window as u32),
            sinks: Some(tl.require(&blk(il, "attn_sinks.weight"), &[hp.n_head[il]])?),
            norm_eps: hp.rms_eps,
            kv_layer: il as u32,
        };
        layers.push(Layer {
            attn_norm: tl.require(&blk(il, "attn_norm.weight"), &[e])?,
            attn: builders::load_attention(tl, hp, il, false)?,
            cfg,
            post_attn_norm: tl.require(&blk(il, "post_attention_norm.weight"), &[e])?,
            router_bias: tl.require(&blk(il, "ffn_gate_inp.bias"), &[ne])?,
            moe,
        });
    }
    let kv = builders::uniform_kv_layers(hp, |il| layers[il].cfg.window);
    Ok(Box::new(GptOss { head, layers, eps: hp.rms_eps, n_embd: e, kv }))
}

impl Architecture for GptOss {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        let e = self.n_embd;
        let mut x = g.embed(self.head.tok_embd);
        for (il, l) in self.layers.iter().enumerate() {
            g.set_label(format!("blk.{il}"));
            let h = g.rms_norm(x, Some(l.attn_norm), self.eps, e);
            let att = l.attn.build(g, h, &l.cfg);
            x = g.add(x, att);
            let h = g.rms_norm(x, Some(l.post_attn_norm), self.eps, e);
            let logits = g.linear(h, l.moe.router, Some(l.router_bias));
            let f = g.moe(h, logits, l.moe.params);
            x = g.add(x, f);
        }
        builders::build_logits(g, &self.head, x, self.eps, e);
    }

    fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.kv.clone()
    }
}
