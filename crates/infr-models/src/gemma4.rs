//! Gemma 4 (`gemma4`: 31B-style dense, E2B/E4B with per-layer embeddings and KV-shared layers,
//! 26B-A4B with a dense and a routed FFN branch). Mirrors llama.cpp `src/models/gemma4.cpp`:
//!
//! - embeddings times `sqrt(n_embd)`; sliding and global layers with their own head dims, KV
//!   head counts, RoPE bases and rotated dims (global layers: "proportional" RoPE through
//!   `rope_freqs.weight`); attention scale 1; V is RMS-normed without weight, and a layer
//!   without `attn_v` uses its raw K projection as V;
//! - sandwich norms around attention and FFN; GeGLU FFNs; a MoE layer adds a routed branch
//!   whose router reads `rms_norm(h) / sqrt(n_embd) * ffn_gate_inp.scale`;
//! - per-layer embeddings (PLE): a token table and a projection of the embedding give each
//!   layer a small vector that gates a residual update after its FFN;
//! - the last `shared_kv_layers` layers write no KV and read an earlier layer's cache;
//! - each layer's output times `layer_output_scale`; final logit soft-capping.

use infr_core::{
    Activation, AttnParams, ExpertGateUp, GraphBuilder, KvLayerSpec, MoeGating, MoeParams, RopeMode, RopeParams,
    RopeScaling, TensorId, WeightId, WeightSource,
};

use crate::builders::{self, blk, GatedFfn, MoeHparams, OutputHead};
use crate::{Architecture, Hparams, ModelError, TensorLoader};

/// One attention block's tensors and geometry.
#[derive(Debug, Clone, Copy)]
struct Attn {
    wq: WeightId,
    /// K and V projections (`None` on KV-shared layers); V `None` means V = raw K.
    wk: Option<WeightId>,
    wv: Option<WeightId>,
    wo: WeightId,
    q_norm: WeightId,
    k_norm: Option<WeightId>,
    n_head: u32,
    n_kv_head: u32,
    head_dim: u32,
    rope: RopeParams,
    window: Option<u32>,
    kv_layer: u32,
    /// For a KV-shared layer: the layer whose K/V it reads.
    donor: Option<usize>,
}

#[derive(Debug, Clone, Copy)]
enum Ffn {
    Dense(GatedFfn),
    /// Dense branch plus routed experts, each with its norms.
    Moe {
        dense: GatedFfn,
        post_1: WeightId,
        pre_2: WeightId,
        router: WeightId,
        router_scale: WeightId,
        experts: MoeParams,
        post_2: WeightId,
    },
}

/// A layer's per-layer-embedding update.
#[derive(Debug, Clone, Copy)]
struct PleLayer {
    inp_gate: WeightId,
    proj: WeightId,
    post_norm: WeightId,
}

#[derive(Debug, Clone)]
struct Layer {
    attn_norm: WeightId,
    attn: Attn,
    attn_post_norm: WeightId,
    ffn_norm: WeightId,
    ffn: Ffn,
    ffn_post_norm: WeightId,
    ple: Option<PleLayer>,
    out_scale: Option<f32>,
}

/// The model-level per-layer-embedding tensors.
#[derive(Debug, Clone, Copy)]
struct Ple {
    width: usize,
    tok_embd: WeightId,
    model_proj: WeightId,
    proj_norm: WeightId,
}

/// A loaded Gemma 4 text stack (also the encoder and, with its own layer scales, the decoder
/// of DiffusionGemma).
#[derive(Debug)]
pub(crate) struct Gemma4 {
    head: OutputHead,
    layers: Vec<Layer>,
    ple: Option<Ple>,
    eps: f32,
    n_embd: usize,
    final_softcap: Option<f32>,
    kv: Vec<KvLayerSpec>,
    /// The GELU of every gated unit.
    act: Activation,
}

/// The value of a one-element weight (`layer_output_scale`), read at load time.
pub(crate) fn scalar(src: &dyn WeightSource, name: &str) -> Result<Option<f32>, ModelError> {
    let Some(d) = src.data(name) else { return Ok(None) };
    if d.info.dims.iter().product::<usize>() != 1 {
        return Err(ModelError::BadHparam(format!("{name} is not a single value")));
    }
    let v = infr_quant::dequantize_to_vec(d.info.ty, &d.bytes).map_err(|e| ModelError::BadHparam(e.to_string()))?;
    Ok(v.first().copied())
}

/// Loader for `general.architecture = gemma4`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    Ok(Box::new(load_stack(hp, src, tl, Activation::GeluTanh)?))
}

/// Load the Gemma 4 stack under the file's architecture prefix, with its GELU evaluated as
/// `act` says (see [`Activation::GeluTanhExact`]).
pub(crate) fn load_stack(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
    act: Activation,
) -> Result<Gemma4, ModelError> {
    hp.require_heads()?;
    let keys = hp.keys(src.metadata());
    let is_swa = keys
        .bool_array("attention.sliding_window_pattern")?
        .filter(|v| v.len() == hp.n_layer)
        .ok_or_else(|| ModelError::BadHparam("gemma4 needs a per-layer sliding_window_pattern".into()))?;
    let window = keys.req_u("attention.sliding_window")? as u32;
    let head_dim_swa = keys.req_u("attention.key_length_swa")?;
    if keys.req_u("attention.value_length_swa")? != head_dim_swa || hp.head_dim_k != hp.head_dim_v {
        return Err(ModelError::BadHparam("gemma4 needs equal K and V head sizes".into()));
    }
    let n_rot_swa = keys.u("rope.dimension_count_swa")?.unwrap_or(head_dim_swa);
    let base_swa = keys.f("rope.freq_base_swa")?.unwrap_or(hp.rope_freq_base);
    let n_shared = keys.u("attention.shared_kv_layers")?.unwrap_or(0);
    let kv_from = hp
        .n_layer
        .checked_sub(n_shared)
        .filter(|&n| n_shared == 0 || n >= 2)
        .ok_or_else(|| ModelError::BadHparam(format!("{n_shared} shared KV layers of {}", hp.n_layer)))?;
    let final_softcap = keys.f("final_logit_softcapping")?.filter(|&c| c != 0.0);
    let ple_width = keys.req_u("embedding_length_per_layer_input")?;
    let e = hp.n_embd;
    let head = builders::load_output_head(tl, hp)?;
    let rope_freqs = tl.optional("rope_freqs.weight", &[hp.head_dim_k / 2])?;
    let moe_hp = if tl.has(&blk(0, "ffn_gate_inp.weight")) { Some(MoeHparams::read(hp, src)?) } else { None };
    let ple = if ple_width > 0 {
        let all = ple_width * hp.n_layer;
        Some(Ple {
            width: ple_width,
            tok_embd: tl.require("per_layer_token_embd.weight", &[all, hp.n_vocab])?,
            model_proj: tl.require("per_layer_model_proj.weight", &[e, all])?,
            proj_norm: tl.require("per_layer_proj_norm.weight", &[ple_width])?,
        })
    } else {
        None
    };
    let mut layers = Vec::with_capacity(hp.n_layer);
    let mut kv = Vec::new();
    for il in 0..hp.n_layer {
        let swa = is_swa[il];
        let (hd, n_rot, base, ff) = if swa {
            (head_dim_swa, n_rot_swa, base_swa, None)
        } else {
            (hp.head_dim_k, hp.n_rot, hp.rope_freq_base, rope_freqs)
        };
        let rope = RopeParams {
            mode: RopeMode::Neox,
            head_dim: hd as u32,
            n_rot: n_rot as u32,
            freq_base: base,
            freq_scale: if swa { 1.0 } else { hp.rope_freq_scale },
            scaling: RopeScaling::None,
            freq_factors: ff,
        };
        let (h, hkv) = (hp.n_head[il], hp.n_head_kv[il]);
        let donor = (il >= kv_from).then(|| kv_from - if swa { 2 } else { 1 });
        let has_kv = donor.is_none();
        let kv_layer = match donor {
            None => {
                let window = swa.then_some(window);
                kv.push(KvLayerSpec { n_kv_head: hkv as u32, head_dim_k: hd as u32, head_dim_v: hd as u32, window });
                kv.len() as u32 - 1
            }
            Some(d) => {
                let da: &Layer = &layers[d];
                if is_swa[d] != swa || da.attn.head_dim != hd as u32 || da.attn.n_kv_head != hkv as u32 {
                    return Err(ModelError::BadHparam(format!("layer {il} cannot share the KV of layer {d}")));
                }
                da.attn.kv_layer
            }
        };
        let attn = Attn {
            wq: tl.require(&blk(il, "attn_q.weight"), &[e, h * hd])?,
            wk: if has_kv { Some(tl.require(&blk(il, "attn_k.weight"), &[e, hkv * hd])?) } else { None },
            wv: if has_kv { tl.optional(&blk(il, "attn_v.weight"), &[e, hkv * hd])? } else { None },
            wo: tl.require(&blk(il, "attn_output.weight"), &[h * hd, e])?,
            q_norm: tl.require(&blk(il, "attn_q_norm.weight"), &[hd])?,
            k_norm: if has_kv { Some(tl.require(&blk(il, "attn_k_norm.weight"), &[hd])?) } else { None },
            n_head: h as u32,
            n_kv_head: hkv as u32,
            head_dim: hd as u32,
            rope,
            window: swa.then_some(window),
            kv_layer,
            donor,
        };
        let dense = builders::load_gated_ffn(tl, hp, il, act)?;
        let ffn = match &moe_hp {
            Some(mh) if tl.has(&blk(il, "ffn_gate_inp.weight")) => {
                let (ne, fe) = (mh.n_expert, mh.n_ff_exp[il]);
                let gate_up = match tl.optional(&blk(il, "ffn_gate_up_exps.weight"), &[e, 2 * fe, ne])? {
                    Some(gu) => ExpertGateUp::Fused(gu),
                    None => ExpertGateUp::Separate {
                        gate: tl.require(&blk(il, "ffn_gate_exps.weight"), &[e, fe, ne])?,
                        up: tl.require(&blk(il, "ffn_up_exps.weight"), &[e, fe, ne])?,
                    },
                };
                let experts = MoeParams {
                    n_expert: ne as u32,
                    n_used: mh.n_used as u32,
                    n_ff: fe as u32,
                    gating: MoeGating::Softmax,
                    renorm: true,
                    weight_before: false,
                    gate_up,
                    down: tl.require(&blk(il, "ffn_down_exps.weight"), &[fe, e, ne])?,
                    act,
                    expert_scale: tl.optional(&blk(il, "ffn_down_exps.scale"), &[ne])?,
                    shared: None,
                    gate_up_bias: None,
                    down_bias: None,
                    expert_slice: None,
                };
                Ffn::Moe {
                    dense,
                    post_1: tl.require(&blk(il, "post_ffw_norm_1.weight"), &[e])?,
                    pre_2: tl.require(&blk(il, "pre_ffw_norm_2.weight"), &[e])?,
                    router: tl.require(&blk(il, "ffn_gate_inp.weight"), &[e, ne])?,
                    router_scale: tl.require(&blk(il, "ffn_gate_inp.scale"), &[e])?,
                    experts,
                    post_2: tl.require(&blk(il, "post_ffw_norm_2.weight"), &[e])?,
                }
            }
            _ => Ffn::Dense(dense),
        };
        let ple_layer = match ple {
            Some(p) => Some(PleLayer {
                inp_gate: tl.require(&blk(il, "inp_gate.weight"), &[e, p.width])?,
                proj: tl.require(&blk(il, "proj.weight"), &[p.width, e])?,
                post_norm: tl.require(&blk(il, "post_norm.weight"), &[e])?,
            }),
            None => None,
        };
        layers.push(Layer {
            attn_norm: tl.require(&blk(il, "attn_norm.weight"), &[e])?,
            attn,
            attn_post_norm: tl.require(&blk(il, "post_attention_norm.weight"), &[e])?,
            ffn_norm: tl.require(&blk(il, "ffn_norm.weight"), &[e])?,
            ffn,
            ffn_post_norm: tl.require(&blk(il, "post_ffw_norm.weight"), &[e])?,
            ple: ple_layer,
            out_scale: scalar(src, &blk(il, "layer_output_scale.weight"))?,
        });
    }
    Ok(Gemma4 { head, layers, ple, eps: hp.rms_eps, n_embd: e, final_softcap, kv, act })
}

/// How [`Gemma4::layers`] runs the stack: causal and writing its K/V (the autoregressive
/// model, DiffusionGemma's encoder), or as DiffusionGemma's decoder.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pass<'a> {
    Causal,
    /// Bidirectional over the step's canvas, with these per-layer output scales.
    Denoise {
        out_scales: &'a [Option<f32>],
    },
}

impl Gemma4 {
    /// Every layer's per-layer input, side by side (`[rows, width * n_layer]`): the token's
    /// PLE row times `sqrt(width)` plus the normed projection of the scaled embedding, over
    /// `sqrt(2)` (llama.cpp `build_inp_per_layer` + `project_per_layer_inputs`).
    fn per_layer_inputs(&self, g: &mut GraphBuilder<'_>, p: &Ple, x: TensorId) -> TensorId {
        let tok = g.embed(p.tok_embd);
        let tok = g.scale(tok, (p.width as f32).sqrt());
        let proj = g.linear(x, p.model_proj, None);
        let proj = g.scale(proj, 1.0 / (self.n_embd as f32).sqrt());
        let proj = g.rms_norm(proj, Some(p.proj_norm), self.eps, p.width);
        let sum = g.add(proj, tok);
        g.scale(sum, std::f32::consts::FRAC_1_SQRT_2)
    }

    /// Attention of layer `l` on normed input `h`; returns the projected output and the
    /// layer's K/V nodes (what a KV-sharing layer hands the attention op).
    fn attention(
        &self,
        g: &mut GraphBuilder<'_>,
        a: &Attn,
        h: TensorId,
        kv_nodes: &[Option<(TensorId, TensorId)>],
        bidirectional: bool,
    ) -> (TensorId, (TensorId, TensorId)) {
        let d = a.head_dim as usize;
        let q = g.linear(h, a.wq, None);
        let q = g.rms_norm(q, Some(a.q_norm), self.eps, d);
        let q = g.rope(q, a.rope);
        let (k, v) = match (a.wk, a.donor) {
            (Some(wk), _) => {
                let k_raw = g.linear(h, wk, None);
                let v = match a.wv {
                    Some(wv) => g.linear(h, wv, None),
                    None => k_raw,
                };
                let k = g.rms_norm(k_raw, a.k_norm, self.eps, d);
                let k = g.rope(k, a.rope);
                (k, g.rms_norm(v, None, self.eps, d))
            }
            (None, Some(donor)) => kv_nodes[donor].expect("the donor layer comes first"),
            (None, None) => unreachable!("a layer without K has a donor"),
        };
        let params = AttnParams {
            kv_layer: a.kv_layer,
            n_head: a.n_head,
            n_kv_head: a.n_kv_head,
            head_dim_k: a.head_dim,
            head_dim_v: a.head_dim,
            scale: 1.0,
            softcap: None,
            window: a.window,
            chunk: None,
            sinks: None,
            write_kv: a.donor.is_none(),
            bidirectional,
        };
        let out = g.attention(q, k, v, params);
        (g.linear(out, a.wo, None), (k, v))
    }

    /// The FFN on the residual `x` (post-attention); returns its post-normed output.
    fn ffn(&self, g: &mut GraphBuilder<'_>, l: &Layer, x: TensorId) -> TensorId {
        let e = self.n_embd;
        let out = match &l.ffn {
            Ffn::Dense(f) => {
                let h = g.rms_norm(x, Some(l.ffn_norm), self.eps, e);
                f.build(g, h)
            }
            Ffn::Moe { dense, post_1, pre_2, router, router_scale, experts, post_2 } => {
                let h = g.rms_norm(x, Some(l.ffn_norm), self.eps, e);
                let mlp = dense.build(g, h);
                let mlp = g.rms_norm(mlp, Some(*post_1), self.eps, e);
                let r = g.rms_norm(x, Some(*router_scale), self.eps, e);
                let r = g.scale(r, 1.0 / (e as f32).sqrt());
                let logits = g.linear(r, *router, None);
                let h2 = g.rms_norm(x, Some(*pre_2), self.eps, e);
                let moe = g.moe(h2, logits, *experts);
                let moe = g.rms_norm(moe, Some(*post_2), self.eps, e);
                g.add(mlp, moe)
            }
        };
        g.rms_norm(out, Some(l.ffn_post_norm), self.eps, e)
    }
}

impl Gemma4 {
    /// The model width.
    pub(crate) fn n_embd(&self) -> usize {
        self.n_embd
    }

    /// The RMS-norm epsilon.
    pub(crate) fn eps(&self) -> f32 {
        self.eps
    }

    /// The token embedding table (also the tied output head).
    pub(crate) fn tok_embd(&self) -> WeightId {
        self.head.tok_embd
    }

    /// The scaled token embeddings of the step.
    pub(crate) fn embed(&self, g: &mut GraphBuilder<'_>) -> TensorId {
        let x = g.embed(self.head.tok_embd);
        g.scale(x, (self.n_embd as f32).sqrt())
    }

    /// Every layer on input `x` (whose per-layer inputs, if any, come from `x` too); returns
    /// the last hidden state.
    pub(crate) fn layers(&self, g: &mut GraphBuilder<'_>, mut x: TensorId, pass: Pass<'_>) -> TensorId {
        let e = self.n_embd;
        let ple_all = self.ple.map(|p| (p, self.per_layer_inputs(g, &p, x)));
        let n_layer = self.layers.len();
        let mut kv_nodes: Vec<Option<(TensorId, TensorId)>> = vec![None; n_layer];
        let bidirectional = matches!(pass, Pass::Denoise { .. });
        for (il, l) in self.layers.iter().enumerate() {
            g.set_label(format!("blk.{il}"));
            let h = g.rms_norm(x, Some(l.attn_norm), self.eps, e);
            let (a, kvn) = self.attention(g, &l.attn, h, &kv_nodes, bidirectional);
            kv_nodes[il] = Some(kvn);
            let a = g.rms_norm(a, Some(l.attn_post_norm), self.eps, e);
            x = g.add(a, x);
            let f = self.ffn(g, l, x);
            x = g.add(f, x);
            if let (Some(pl), Some((p, all))) = (&l.ple, ple_all) {
                let gate = g.linear(x, pl.inp_gate, None);
                let mine = g.slice_cols(all, p.width * n_layer, il * p.width, p.width);
                let u = g.glu(gate, mine, self.act);
                let u = g.linear(u, pl.proj, None);
                let u = g.rms_norm(u, Some(pl.post_norm), self.eps, e);
                x = g.add(x, u);
            }
            let scale = match pass {
                Pass::Causal => l.out_scale,
                Pass::Denoise { out_scales } => out_scales.get(il).copied().flatten(),
            };
            if let Some(s) = scale {
                x = g.scale(x, s);
            }
        }
        x
    }

    /// Output norm, tied head and the final soft-cap on the output rows of `x`.
    pub(crate) fn logits(&self, g: &mut GraphBuilder<'_>, x: TensorId) {
        let logits = builders::build_logits(g, &self.head, x, self.eps, self.n_embd);
        if let Some(cap) = self.final_softcap {
            g.softcap(logits, cap);
        }
    }
}

impl Architecture for Gemma4 {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        let x = self.embed(g);
        let x = self.layers(g, x, Pass::Causal);
        self.logits(g, x);
    }

    fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.kv.clone()
    }
}
