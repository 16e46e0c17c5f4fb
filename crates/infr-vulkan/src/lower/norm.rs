//! Lowering of the RMS norm: the plain kernel, or `norm_q8` where fusion planned it (the
//! residual add before the norm folded in, and the int8 copy the integer-dot matmuls after it
//! read written beside the output).

use std::collections::HashMap;

use infr_core::{TensorId, WeightId};

use super::{bytes, one, u32_of, vector_of, Res};
use crate::error::VkResult;
use crate::fusion::Fusions;
use crate::prefill_matmul::Emit;
use crate::weights::GpuWeight;
use crate::{fused_kernels, kernels};

/// One RMS norm node as the lowering sees it.
pub(super) struct NormNode {
    pub index: usize,
    pub x: TensorId,
    pub weight: Option<WeightId>,
    pub eps: f32,
    /// Elements normalised together (a row, or a head).
    pub group: u32,
    pub rows: usize,
    pub cols: usize,
}

/// The dispatch of an RMS norm node; a fused one registers its int8 copy in `qact_of`.
pub(super) fn rms_norm(
    n: &NormNode,
    fx: &Fusions,
    weights: &HashMap<WeightId, GpuWeight>,
    temp_bytes: &mut Vec<u64>,
    qact_of: &mut HashMap<(u32, u32), u32>,
) -> VkResult<Vec<Emit>> {
    let (i, me, cells) = (n.index, Res::Act(n.index as u32), n.rows * n.cols);
    let wres = match &n.weight {
        Some(wid) => vector_of(weights, i, wid, n.group as usize)?,
        None => Res::Dummy,
    };
    if let Some(nq) = fx.norm_q8.get(&i) {
        let qi = temp_bytes.len() as u32;
        temp_bytes.push(kernels::qact_bytes(n.rows, n.cols));
        qact_of.insert((i as u32, nq.group), qi);
        let p = fused_kernels::NormQ8Params {
            k: n.cols as u32,
            n_rows: n.rows as u32,
            eps: n.eps,
            has_weight: n.weight.is_some() as u32,
            has_add: nq.add.is_some() as u32,
            group: nq.group,
            scale_off: (cells / 16) as u32,
        };
        let (a, b, sum) = match nq.add {
            Some((a, b)) => (Res::Act(a.0), Res::Act(b.0), Res::Act(n.x.0)),
            None => (Res::Act(n.x.0), Res::Dummy, Res::Dummy),
        };
        let res = vec![a, b, sum, me, wres, Res::Temp(qi), Res::Temp(qi)];
        let groups = u32_of(n.rows * (n.cols / 4).div_ceil(256), "norm groups")?;
        return Ok(vec![one(fused_kernels::norm_q8(), res, bytes(&p), groups)]);
    }
    let n_groups = u32_of(cells / n.group as usize, "norm groups")?;
    let p = kernels::NormParams { group: n.group, n_groups, eps: n.eps, has_weight: n.weight.is_some() as u32 };
    Ok(vec![one(kernels::rms_norm(), vec![Res::Act(n.x.0), me, wres], bytes(&p), n_groups)])
}
