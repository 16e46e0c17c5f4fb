//! Lowering of the RMS norm: the plain kernel, or `norm_q8` where fusion planned it (the
//! residual add before the norm folded in, and the int8 copy the integer-dot matmuls after it
//! read written beside the output).

use std::collections::HashMap;

use infr_core::{TensorId, WeightId};

use super::{bytes, one, u32_of, vector_of, Res};
use crate::error::VkResult;
use crate::fused_kernels::QuantOut;
use crate::fusion::{Fusions, NormQ8};
use crate::prefill_matmul::{Emit, F16Buffers};
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

/// The dispatch of an RMS norm node; a fused one registers its int8 copy in `qact_of` (or
/// writes the f16 copy of `f16_bufs`).
pub(super) fn rms_norm(
    n: &NormNode,
    fx: &Fusions,
    weights: &HashMap<WeightId, GpuWeight>,
    temp_bytes: &mut Vec<u64>,
    qact_of: &mut HashMap<(u32, u32), u32>,
    f16_bufs: &mut F16Buffers,
) -> VkResult<Vec<Emit>> {
    let (i, me, cells) = (n.index, Res::Act(n.index as u32), n.rows * n.cols);
    let wres = match &n.weight {
        Some(wid) => vector_of(weights, i, wid, n.group as usize)?,
        None => Res::Dummy,
    };
    if let Some(nq) = fx.norm_q8.get(&i) {
        let sum = match nq.add {
            Some(_) => Res::Act(n.x.0),
            None => Res::Dummy,
        };
        let side = (temp_bytes, qact_of, f16_bufs);
        let out = NormQ8Out { y: me, sum, weight: (wres, n.weight.is_some()), eps: n.eps };
        return Ok(vec![norm_q8(i, nq, n.x, out, (n.rows, n.cols), weights, side)?]);
    }
    let n_groups = u32_of(cells / n.group as usize, "norm groups")?;
    let p = kernels::NormParams { group: n.group, n_groups, eps: n.eps, has_weight: n.weight.is_some() as u32 };
    Ok(vec![one(kernels::rms_norm(), vec![Res::Act(n.x.0), me, wres], bytes(&p), n_groups)])
}

/// Where a `norm_q8` writes: the norm's output `y` (with its weight, whether it has one, and
/// epsilon) and the sum of its add (`Dummy` without one).
struct NormQ8Out {
    y: Res,
    sum: Res,
    weight: (Res, bool),
    eps: f32,
}

/// The `norm_q8` dispatch of node `i` (`rows` x `cols`) planned as `nq`; `x` is its input
/// where it has no add. Registers its int8 copy in `qact_of` (or writes the f16 copy).
fn norm_q8(
    i: usize,
    nq: &NormQ8,
    x: TensorId,
    out: NormQ8Out,
    (rows, cols): (usize, usize),
    weights: &HashMap<WeightId, GpuWeight>,
    (temp_bytes, qact_of, f16_bufs): (&mut Vec<u64>, &mut HashMap<(u32, u32), u32>, &mut F16Buffers),
) -> VkResult<Emit> {
    let (q, qs) = quant_outputs(i as u32, nq.group, nq.out, rows, cols, temp_bytes, qact_of, f16_bufs)?;
    let (b, b_parts, b_stride) = match nq.add {
        Some((_, b)) => read_planes(b, f16_bufs),
        None => (Res::Dummy, 1, 0),
    };
    let (wa, eps_a, pre_norm) =
        norm_operand(nq.pre_norm, (fused_kernels::NORM_A, fused_kernels::WEIGHT_A), weights, i, cols)?;
    let final_norm = if nq.final_norm { 0 } else { fused_kernels::NO_FINAL_NORM };
    let p = fused_kernels::NormQ8Params {
        k: cols as u32,
        n_rows: rows as u32,
        eps: out.eps,
        has_weight: out.weight.1 as u32,
        has_add: nq.add.is_some() as u32,
        group: nq.group,
        scale_off: (rows * cols / 16) as u32,
        b_parts,
        b_stride,
        pre_norm: pre_norm | final_norm,
        eps_a,
        add_scale: nq.add_scale,
    };
    let a = match nq.add {
        Some((a, _)) => Res::Act(a.0),
        None => Res::Act(x.0),
    };
    let res = vec![a, b, out.sum, out.y, out.weight.0, q, qs, wa];
    let groups = u32_of(rows * (cols / 4).div_ceil(256), "norm groups")?;
    Ok(one(fused_kernels::norm_q8(nq.out), res, bytes(&p), groups))
}

/// The dispatch of add node `i` (`rows` x `cols`) that fusion made a `norm_q8` without a
/// final norm ([`NormQ8::final_norm`]): the sum, written to the node's output, and its int8
/// copy.
pub(super) fn add_q8(
    i: usize,
    nq: &NormQ8,
    (rows, cols): (usize, usize),
    weights: &HashMap<WeightId, GpuWeight>,
    side: (&mut Vec<u64>, &mut HashMap<(u32, u32), u32>, &mut F16Buffers),
) -> VkResult<Emit> {
    let me = Res::Act(i as u32);
    let out = NormQ8Out { y: Res::Dummy, sum: me, weight: (Res::Dummy, false), eps: 0.0 };
    norm_q8(i, nq, TensorId(i as u32), out, (rows, cols), weights, side)
}

/// The dispatch of a norm / add / scale run ([`crate::fusion::NormAdd`]) ending at node `i`
/// (`rows` x `cols`), written to that node's output.
pub(super) fn norm_add(
    i: usize,
    na: &crate::fusion::NormAdd,
    rows: usize,
    cols: usize,
    weights: &HashMap<WeightId, GpuWeight>,
) -> VkResult<Emit> {
    use fused_kernels::{HAS_B, NORM_A, NORM_B, WEIGHT_A, WEIGHT_B};
    let (a, (wa, eps_a, fa)) = (Res::Act(na.a.x.0), norm_operand(na.a.norm, (NORM_A, WEIGHT_A), weights, i, cols)?);
    let (b, (wb, eps_b, fb)) = match &na.b {
        Some(b) => {
            let (w, eps, f) = norm_operand(b.norm, (NORM_B, WEIGHT_B), weights, i, cols)?;
            (Res::Act(b.x.0), (w, eps, f | HAS_B))
        }
        None => (Res::Dummy, (Res::Dummy, 0.0, 0)),
    };
    let p = fused_kernels::NormAddParams {
        k: u32_of(cols, "columns")?,
        n_rows: u32_of(rows, "rows")?,
        eps_a,
        eps_b,
        flags: fa | fb,
        scale: na.scale,
    };
    Ok(one(fused_kernels::norm_add(), vec![a, b, wa, wb, Res::Act(i as u32)], bytes(&p), p.n_rows))
}

/// The weight binding, epsilon and flags of an operand's optional whole-row norm (weight and
/// epsilon, as the fusion plan records it) for the fused kernels that apply it: `flags.0` where
/// it is normed, with `flags.1` where the norm has a weight.
fn norm_operand(
    norm: Option<(Option<WeightId>, f32)>,
    flags: (u32, u32),
    weights: &HashMap<WeightId, GpuWeight>,
    i: usize,
    cols: usize,
) -> VkResult<(Res, f32, u32)> {
    Ok(match norm {
        Some((Some(w), eps)) => (vector_of(weights, i, &w, cols)?, eps, flags.0 | flags.1),
        Some((None, eps)) => (Res::Dummy, eps, flags.0),
        None => (Res::Dummy, 0.0, 0),
    })
}

/// The quants and scales bindings of a quantizing kernel producing node `x` (`rows` x
/// `cols`): a new int8 copy registered in `qact_of`, or the f16 copy of `f16_bufs` (rounded as
/// `group` quantizes) with no scales.
#[allow(clippy::too_many_arguments)]
pub(super) fn quant_outputs(
    x: u32,
    group: u32,
    out: QuantOut,
    rows: usize,
    cols: usize,
    temp_bytes: &mut Vec<u64>,
    qact_of: &mut HashMap<(u32, u32), u32>,
    f16_bufs: &mut F16Buffers,
) -> VkResult<(Res, Res)> {
    Ok(match out {
        QuantOut::Int8 => {
            let qi = temp_bytes.len() as u32;
            temp_bytes.push(kernels::qact_bytes(rows, cols));
            qact_of.insert((x, group), qi);
            (Res::Temp(qi), Res::Temp(qi))
        }
        QuantOut::F16 => {
            let mode = if group > 1 { kernels::ROUND_Q8_K } else { kernels::ROUND_Q8_0 };
            (Res::Temp(f16_bufs.x16_written_by_producer(x, mode, rows, cols, temp_bytes)?), Res::Dummy)
        }
    })
}

/// How a fused kernel binds its input `t`: the partial-product planes a split-K matmul left
/// for it (buffer, planes, vec4s between them), or the tensor itself.
pub(super) fn read_planes(t: TensorId, f16_bufs: &mut F16Buffers) -> (Res, u32, u32) {
    match f16_bufs.take_planes(t.0) {
        Some(p) => (p.res, p.parts, p.stride_vec4),
        None => (Res::Act(t.0), 1, 0),
    }
}
