//! Qwen3.5 / 3.6 hybrids (`qwen35`, `qwen35moe`): gated DeltaNet layers interleaved with
//! output-gated full attention, each followed by a dense or mixture-of-experts FFN with a
//! sigmoid-gated shared expert (llama.cpp `src/models/qwen35.cpp`, `qwen35moe.cpp`).
//!
//! Layer: `x += mixer(rms(x, attn_norm)); x += ffn(rms(x, post_attention_norm))`.

use infr_core::{
    Activation, AttnParams, GraphBuilder, KvLayerSpec, MoeGating, RopeMode, RopeParams, StateLayerSpec, TensorId,
    WeightId, WeightSource,
};

use crate::builders::{self, blk, DeltaNetHparams, DeltaNetLayer, Ffn, MoeHparams, MoeStyle, OutputHead};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// A full-attention layer: one projection gives each head's query and its output gate.
#[derive(Debug, Clone, Copy)]
struct GatedAttention {
    /// `{n_embd, 2 * n_head * head_dim}`, per head `[q (head_dim rows) | gate (head_dim rows)]`.
    wq: WeightId,
    wk: WeightId,
    wv: WeightId,
    wo: WeightId,
    q_norm: WeightId,
    k_norm: WeightId,
    n_head: u32,
    n_kv_head: u32,
    head_dim: u32,
    rope: RopeParams,
    eps: f32,
    kv_layer: u32,
}

impl GatedAttention {
    fn build(&self, g: &mut GraphBuilder<'_>, x: TensorId) -> TensorId {
        let d = self.head_dim as usize;
        // The three projections of x first, next to each other: a backend may run those of
        // one weight type as one dispatch.
        let qg = g.linear(x, self.wq, None);
        let k = g.linear(x, self.wk, None);
        let v = g.linear(x, self.wv, None);
        let q = g.slice_cols(qg, 2 * d, 0, d);
        let gate = g.slice_cols(qg, 2 * d, d, d);
        let q = g.rms_norm(q, Some(self.q_norm), self.eps, d);
        let k = g.rms_norm(k, Some(self.k_norm), self.eps, d);
        let q = g.rope(q, self.rope);
        let k = g.rope(k, self.rope);
        let params = AttnParams {
            kv_layer: self.kv_layer,
            n_head: self.n_head,
            n_kv_head: self.n_kv_head,
            head_dim_k: self.head_dim,
            head_dim_v: self.head_dim,
            scale: 1.0 / (d as f32).sqrt(),
            softcap: None,
            window: None,
            chunk: None,
            sinks: None,
            write_kv: true,
            bidirectional: false,
        };
        let a = g.attention(q, k, v, params);
        let a = g.glu(gate, a, Activation::Sigmoid);
        g.linear(a, self.wo, None)
    }
}

#[derive(Debug, Clone, Copy)]
enum Mixer {
    DeltaNet(DeltaNetLayer),
    Attention(GatedAttention),
}

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: WeightId,
    post_norm: WeightId,
    mixer: Mixer,
    ffn: Ffn,
}

/// A loaded Qwen3.5 hybrid.
#[derive(Debug)]
pub(crate) struct Qwen35 {
    head: OutputHead,
    layers: Vec<Layer>,
    eps: f32,
    n_embd: usize,
    kv: Vec<KvLayerSpec>,
    states: Vec<StateLayerSpec>,
}

/// Which layers are DeltaNet: `attention.recurrent_layers` if present, else all but every
/// `full_attention_interval`-th (default 4), as llama.cpp reads them.
fn recurrent_layers(hp: &Hparams, src: &dyn WeightSource) -> Result<Vec<bool>, ModelError> {
    let keys = hp.keys(src.metadata());
    if let Some(v) = keys.bool_array("attention.recurrent_layers")? {
        if v.len() < hp.n_layer {
            return Err(ModelError::BadHparam("attention.recurrent_layers is shorter than block_count".into()));
        }
        return Ok(v[..hp.n_layer].to_vec());
    }
    let n = keys.u("full_attention_interval")?.unwrap_or(4);
    if n == 0 {
        return Err(ModelError::BadHparam("full_attention_interval = 0".into()));
    }
    Ok((0..hp.n_layer).map(|il| (il + 1) % n != 0).collect())
}

fn load(hp: &Hparams, src: &dyn WeightSource, tl: &mut TensorLoader<'_>, moe: bool) -> Result<Qwen35, ModelError> {
    hp.require_heads()?;
    if hp.head_dim_k != hp.head_dim_v {
        return Err(ModelError::BadHparam("different K and V head sizes are not supported here".into()));
    }
    let head = builders::load_output_head(tl, hp)?;
    let dn = DeltaNetHparams::read(hp, src)?;
    let recurrent = recurrent_layers(hp, src)?;
    // Text positions are the same in every M-RoPE section, so IMRoPE reduces to NeoX rope
    // over the first `n_rot` dimensions.
    let rope = builders::rope_params(hp, RopeMode::Neox, hp.rope_freq_base, hp.rope_freq_scale, None);
    let moe_hp = if moe { Some(MoeHparams::read(hp, src)?) } else { None };
    let (e, d) = (hp.n_embd, hp.head_dim_k);
    let (mut layers, mut kv, mut states) = (Vec::new(), Vec::new(), Vec::new());
    for (il, &is_recurrent) in recurrent.iter().enumerate() {
        let mixer = if is_recurrent {
            let layer = builders::load_delta_net(tl, hp, dn, il, states.len() as u32)?;
            states.extend(dn.state_layers());
            Mixer::DeltaNet(layer)
        } else {
            let (h, hkv) = (hp.n_head[il], hp.n_head_kv[il]);
            let a = GatedAttention {
                wq: tl.require(&blk(il, "attn_q.weight"), &[e, 2 * h * d])?,
                wk: tl.require(&blk(il, "attn_k.weight"), &[e, hkv * d])?,
                wv: tl.require(&blk(il, "attn_v.weight"), &[e, hkv * d])?,
                wo: tl.require(&blk(il, "attn_output.weight"), &[h * d, e])?,
                q_norm: tl.require(&blk(il, "attn_q_norm.weight"), &[d])?,
                k_norm: tl.require(&blk(il, "attn_k_norm.weight"), &[d])?,
                n_head: h as u32,
                n_kv_head: hkv as u32,
                head_dim: d as u32,
                rope,
                eps: hp.rms_eps,
                kv_layer: kv.len() as u32,
            };
            kv.push(KvLayerSpec { n_kv_head: hkv as u32, head_dim_k: d as u32, head_dim_v: d as u32, window: None });
            Mixer::Attention(a)
        };
        let ffn = match &moe_hp {
            Some(mh) => {
                let style = MoeStyle {
                    gating: MoeGating::Softmax,
                    renorm: true,
                    weight_before: false,
                    act: Activation::Silu,
                    shared: tl.has(&blk(il, "ffn_up_shexp.weight")),
                    shared_gated: true,
                };
                Ffn::Moe(builders::load_moe(tl, hp, mh, il, style)?)
            }
            None => Ffn::Dense(builders::load_gated_ffn(tl, hp, il, Activation::Silu)?),
        };
        layers.push(Layer {
            attn_norm: tl.require(&blk(il, "attn_norm.weight"), &[e])?,
            post_norm: tl.require(&blk(il, "post_attention_norm.weight"), &[e])?,
            mixer,
            ffn,
        });
    }
    Ok(Qwen35 { head, layers, eps: hp.rms_eps, n_embd: e, kv, states })
}

impl Architecture for Qwen35 {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        let e = self.n_embd;
        let mut x = g.embed(self.head.tok_embd);
        for (il, l) in self.layers.iter().enumerate() {
            g.set_label(format!("blk.{il}"));
            let h = g.rms_norm(x, Some(l.attn_norm), self.eps, e);
            let a = match &l.mixer {
                Mixer::DeltaNet(dn) => dn.build(g, h),
                Mixer::Attention(at) => at.build(g, h),
            };
            x = g.add(x, a);
            let h = g.rms_norm(x, Some(l.post_norm), self.eps, e);
            let f = l.ffn.build(g, h);
            x = g.add(x, f);
        }
        builders::build_logits(g, &self.head, x, self.eps, e);
    }

    fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.kv.clone()
    }

    fn state_layers(&self) -> Vec<StateLayerSpec> {
        self.states.clone()
    }
}

/// Loader for `general.architecture = qwen35`.
pub(crate) fn load_dense(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    Ok(Box::new(load(hp, src, tl, false)?))
}

/// Loader for `general.architecture = qwen35moe`.
pub(crate) fn load_moe(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    Ok(Box::new(load(hp, src, tl, true)?))
}
