//! Mixture-of-experts FFN: a router linear layer and the [`infr_core::Op::Moe`] op over the
//! 3-D expert tensors (`build_moe_ffn` in llama.cpp), plus the FFN kind a layer has.

use infr_core::{
    Activation, ExpertGateUp, GraphBuilder, MoeGating, MoeParams, SharedExpert, TensorId, WeightId, WeightSource,
};

use super::{blk, GatedFfn};
use crate::{Hparams, ModelError, TensorLoader};

/// Expert counts and widths (`{arch}.expert_*` keys).
#[derive(Debug, Clone)]
pub struct MoeHparams {
    pub n_expert: usize,
    pub n_used: usize,
    /// Hidden width of a routed expert, per layer.
    pub n_ff_exp: Vec<usize>,
    /// Hidden width of the shared expert, per layer (0: none expected).
    pub n_ff_shexp: Vec<usize>,
}

/// Most experts a file may declare (real models have up to 512).
const MAX_EXPERTS: usize = 4096;

impl MoeHparams {
    /// Read the expert keys; `expert_feed_forward_length` falls back to
    /// `feed_forward_length / expert_used_count` as llama.cpp does.
    pub fn read(hp: &Hparams, src: &dyn WeightSource) -> Result<Self, ModelError> {
        let k = hp.keys(src.metadata());
        let n_expert = k.req_u("expert_count")?;
        let n_used = k.req_u("expert_used_count")?;
        if n_expert == 0 || n_expert > MAX_EXPERTS || n_used == 0 || n_used > n_expert {
            return Err(ModelError::BadHparam(format!(
                "{} = {n_expert}, {} = {n_used}",
                k.name("expert_count"),
                k.name("expert_used_count")
            )));
        }
        let n_ff_exp = match k.per_layer("expert_feed_forward_length", hp.n_layer)? {
            Some(v) => v,
            None => hp.n_ff.iter().map(|f| f / n_used).collect(),
        };
        if n_ff_exp.contains(&0) {
            return Err(ModelError::BadHparam(format!("{} is missing or zero", k.name("expert_feed_forward_length"))));
        }
        let n_ff_shexp =
            k.per_layer("expert_shared_feed_forward_length", hp.n_layer)?.unwrap_or_else(|| hp.n_ff.clone());
        Ok(Self { n_expert, n_used, n_ff_exp, n_ff_shexp })
    }
}

/// How a family routes: the parts of [`MoeParams`] that are not tensors.
#[derive(Debug, Clone, Copy)]
pub struct MoeStyle {
    pub gating: MoeGating,
    pub renorm: bool,
    pub weight_before: bool,
    pub act: Activation,
    /// Whether the layer has a shared expert (`ffn_{gate,up,down}_shexp`), and whether it is
    /// gated per token (`ffn_gate_inp_shexp`).
    pub shared: bool,
    pub shared_gated: bool,
}

/// A router and its experts.
#[derive(Debug, Clone, Copy)]
pub struct MoeFfn {
    pub router: WeightId,
    pub params: MoeParams,
}

/// Load layer `il`'s expert tensors (`ffn_gate_inp`, `ffn_{gate,up}_exps` or the fused
/// `ffn_gate_up_exps`, `ffn_down_exps`, and the shared expert as `style` says).
pub fn load_moe(
    tl: &mut TensorLoader<'_>,
    hp: &Hparams,
    mh: &MoeHparams,
    il: usize,
    style: MoeStyle,
) -> Result<MoeFfn, ModelError> {
    let (e, ne, ff) = (hp.n_embd, mh.n_expert, mh.n_ff_exp[il]);
    let router = tl.require(&blk(il, "ffn_gate_inp.weight"), &[e, ne])?;
    let gate_up = match tl.optional(&blk(il, "ffn_gate_up_exps.weight"), &[e, 2 * ff, ne])? {
        Some(gu) => ExpertGateUp::Fused(gu),
        None => ExpertGateUp::Separate {
            gate: tl.require(&blk(il, "ffn_gate_exps.weight"), &[e, ff, ne])?,
            up: tl.require(&blk(il, "ffn_up_exps.weight"), &[e, ff, ne])?,
        },
    };
    let down = tl.require(&blk(il, "ffn_down_exps.weight"), &[ff, e, ne])?;
    let shared = if style.shared {
        let fs = mh.n_ff_shexp[il];
        if fs == 0 {
            return Err(ModelError::BadHparam(format!("{}: shared expert width is zero", hp.arch)));
        }
        let gate_inp =
            if style.shared_gated { Some(tl.require(&blk(il, "ffn_gate_inp_shexp.weight"), &[e])?) } else { None };
        Some(SharedExpert {
            gate: tl.require(&blk(il, "ffn_gate_shexp.weight"), &[e, fs])?,
            up: tl.require(&blk(il, "ffn_up_shexp.weight"), &[e, fs])?,
            down: tl.require(&blk(il, "ffn_down_shexp.weight"), &[fs, e])?,
            gate_inp,
        })
    } else {
        None
    };
    let params = MoeParams {
        n_expert: ne as u32,
        n_used: mh.n_used as u32,
        n_ff: ff as u32,
        gating: style.gating,
        renorm: style.renorm,
        weight_before: style.weight_before,
        gate_up,
        down,
        act: style.act,
        expert_scale: None,
        shared,
        gate_up_bias: None,
        down_bias: None,
        expert_slice: None,
    };
    Ok(MoeFfn { router, params })
}

impl MoeFfn {
    /// Build on normalised input `x` (the router reads the same input).
    pub fn build(&self, g: &mut GraphBuilder<'_>, x: TensorId) -> TensorId {
        let logits = g.linear(x, self.router, None);
        g.moe(x, logits, self.params)
    }
}

/// The FFN of a decoder layer: dense or mixture-of-experts.
#[derive(Debug, Clone, Copy)]
pub enum Ffn {
    Dense(GatedFfn),
    Moe(MoeFfn),
}

impl Ffn {
    /// Build on normalised input `x`.
    pub fn build(&self, g: &mut GraphBuilder<'_>, x: TensorId) -> TensorId {
        match self {
            Ffn::Dense(f) => f.build(g, x),
            Ffn::Moe(m) => m.build(g, x),
        }
    }
}
