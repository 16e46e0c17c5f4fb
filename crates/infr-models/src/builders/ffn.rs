//! Gated feed-forward: `down(act(gate(x)) * up(x))` — `build_ffn` with `LLM_FFN_PAR`.

use infr_core::{Activation, GraphBuilder, TensorId, WeightId};

use super::blk;
use crate::{Hparams, ModelError, TensorLoader};

/// The tensors of a gated FFN and its activation.
#[derive(Debug, Clone, Copy)]
pub struct GatedFfn {
    pub gate: WeightId,
    pub up: WeightId,
    pub down: WeightId,
    pub act: Activation,
}

/// Load `blk.{il}.ffn_{gate,up,down}.weight`.
pub fn load_gated_ffn(
    tl: &mut TensorLoader<'_>,
    hp: &Hparams,
    il: usize,
    act: Activation,
) -> Result<GatedFfn, ModelError> {
    let (e, f) = (hp.n_embd, hp.n_ff[il]);
    if f == 0 {
        return Err(ModelError::BadHparam(format!("{}.feed_forward_length is missing or zero", hp.arch)));
    }
    Ok(GatedFfn {
        gate: tl.require(&blk(il, "ffn_gate.weight"), &[e, f])?,
        up: tl.require(&blk(il, "ffn_up.weight"), &[e, f])?,
        down: tl.require(&blk(il, "ffn_down.weight"), &[f, e])?,
        act,
    })
}

impl GatedFfn {
    /// Build on normalised input `x`.
    pub fn build(&self, g: &mut GraphBuilder<'_>, x: TensorId) -> TensorId {
        let gate = g.linear(x, self.gate, None);
        let up = g.linear(x, self.up, None);
        let h = g.glu(gate, up, self.act);
        g.linear(h, self.down, None)
    }
}
