//! LLaMA (and the plain pre-norm decoders built like it: SmolLM2, Llama 2/3, Mistral):
//! `x += attn(rms(x)); x += ffn(rms(x))`. Mirrors llama.cpp `src/models/llama.cpp`.

use infr_core::{Activation, GraphBuilder, KvLayerSpec, RopeMode, WeightSource};

use crate::builders::{self, blk, AttnConfig, AttnWeights, Ffn, MoeHparams, MoeStyle, OutputHead};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// One pre-norm decoder layer.
#[derive(Debug, Clone)]
pub(crate) struct DenseLayer {
    pub attn_norm: infr_core::WeightId,
    pub attn: AttnWeights,
    pub ffn_norm: infr_core::WeightId,
    pub ffn: Ffn,
    pub cfg: AttnConfig,
}

/// A stack of pre-norm decoder layers with an output head; shared by llama, qwen2, qwen3.
#[derive(Debug)]
pub(crate) struct DenseDecoder {
    pub head: OutputHead,
    pub layers: Vec<DenseLayer>,
    pub eps: f32,
    pub n_embd: usize,
    pub kv: Vec<KvLayerSpec>,
}

/// Options that distinguish the families sharing [`DenseDecoder`].
pub(crate) struct DenseOptions {
    pub rope_mode: RopeMode,
    /// Per-head RMS norms on Q and K (Qwen3).
    pub qk_norm: bool,
    /// Every layer's FFN is a mixture of experts routed this way (Qwen3-MoE).
    pub moe: Option<MoeStyle>,
}

/// Load a dense decoder with standard tensor names.
pub(crate) fn load_dense(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
    opt: DenseOptions,
) -> Result<DenseDecoder, ModelError> {
    hp.require_heads()?;
    let head = builders::load_output_head(tl, hp)?;
    let freq_factors = tl.optional("rope_freqs.weight", &[hp.n_rot / 2])?;
    let keys = hp.keys(src.metadata());
    let kq_scale = keys.f("attention.scale")?.filter(|&s| s != 0.0).unwrap_or(1.0 / (hp.head_dim_k as f32).sqrt());
    let rope = builders::rope_params(hp, opt.rope_mode, hp.rope_freq_base, hp.rope_freq_scale, freq_factors);
    let moe_hp = match opt.moe {
        Some(_) => Some(MoeHparams::read(hp, src)?),
        None => None,
    };
    let mut layers = Vec::with_capacity(hp.n_layer);
    let mut kv = Vec::with_capacity(hp.n_layer);
    for il in 0..hp.n_layer {
        let cfg = AttnConfig {
            n_head: hp.n_head[il] as u32,
            n_kv_head: hp.n_head_kv[il] as u32,
            head_dim: hp.head_dim_k as u32,
            rope,
            q_scale: None,
            kq_scale,
            softcap: None,
            window: None,
            sinks: None,
            norm_eps: hp.rms_eps,
            kv_layer: il as u32,
        };
        if hp.head_dim_k != hp.head_dim_v {
            return Err(ModelError::BadHparam("different K and V head sizes are not supported here".into()));
        }
        kv.push(KvLayerSpec {
            n_kv_head: cfg.n_kv_head,
            head_dim_k: hp.head_dim_k as u32,
            head_dim_v: hp.head_dim_v as u32,
            window: None,
        });
        layers.push(DenseLayer {
            attn_norm: tl.require(&blk(il, "attn_norm.weight"), &[hp.n_embd])?,
            attn: builders::load_attention(tl, hp, il, opt.qk_norm)?,
            ffn_norm: tl.require(&blk(il, "ffn_norm.weight"), &[hp.n_embd])?,
            ffn: match (opt.moe, &moe_hp) {
                (Some(style), Some(mh)) => Ffn::Moe(builders::load_moe(tl, hp, mh, il, style)?),
                _ => Ffn::Dense(builders::load_gated_ffn(tl, hp, il, Activation::Silu)?),
            },
            cfg,
        });
    }
    Ok(DenseDecoder { head, layers, eps: hp.rms_eps, n_embd: hp.n_embd, kv })
}

impl Architecture for DenseDecoder {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        let e = self.n_embd;
        let mut x = g.embed(self.head.tok_embd);
        for (il, l) in self.layers.iter().enumerate() {
            g.set_label(format!("blk.{il}"));
            let h = g.rms_norm(x, Some(l.attn_norm), self.eps, e);
            let a = l.attn.build(g, h, &l.cfg);
            x = g.add(x, a);
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

/// Loader for `general.architecture = llama`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    if hp.n_rot != hp.head_dim_k {
        return Err(ModelError::BadHparam(format!("invalid n_rot {}, expected {}", hp.n_rot, hp.head_dim_k)));
    }
    Ok(Box::new(load_dense(hp, src, tl, DenseOptions { rope_mode: RopeMode::Normal, qk_norm: false, moe: None })?))
}
