//! Lowering of the ops that map each element (or row) on its own: add, multiply, scale,
//! temperature scaling by position, soft-capping, the gated linear units (with the int8 copy
//! fusion planned for them), RoPE and the gather of the output rows.

use std::collections::HashMap;

use infr_core::{Op, RopeParams, TensorId, WeightId};

use super::{bytes, one, rope_gpu, threads_groups, u32_of, vector_of, Res, StepLayout};
use crate::error::{VkError, VkResult};
use crate::fused_kernels;
use crate::fusion::Fusions;
use crate::kernels::{self, Elt};
use crate::prefill_matmul::{Emit, F16Buffers};
use crate::weights::GpuWeight;

/// One dispatch of the elementwise kernel `op` over `cells` elements: `out = op(a, b)` with
/// the scalar `s` (and `inv_s`).
fn elementwise(op: Elt, (a, b, out): (Res, Res, Res), cells: usize, s: f32, inv_s: f32) -> VkResult<Emit> {
    let p = kernels::EltParams { n: u32_of(cells, "elements")?, s, inv_s };
    let (spec, groups) = kernels::elementwise(op, cells);
    Ok(one(spec, vec![a, b, out], bytes(&p), groups))
}

/// The dispatch of node `i` (`rows` x `cols`) for an add, multiply, scale, temperature
/// scaling, soft-cap, gated linear unit or output-row gather; a fused GLU registers its int8
/// copy in `qact_of` (or writes the f16 copy of `f16_bufs`).
pub(super) fn lower(
    i: usize,
    op: &Op,
    rows: usize,
    cols: usize,
    st: &StepLayout,
    fx: &Fusions,
    weights: &HashMap<WeightId, GpuWeight>,
    (temp_bytes, qact_of, f16_bufs): (&mut Vec<u64>, &mut HashMap<(u32, u32), u32>, &mut F16Buffers),
) -> VkResult<Vec<Emit>> {
    let (me, cells) = (Res::Act(i as u32), rows * cols);
    let act = |t: &TensorId| Res::Act(t.0);
    let e = match op {
        Op::Add { a, b } => elementwise(Elt::Add, (act(a), act(b), me), cells, 0.0, 0.0)?,
        Op::Mul { a, b } => elementwise(Elt::Mul, (act(a), act(b), me), cells, 0.0, 0.0)?,
        Op::Scale { x, s } => elementwise(Elt::Scale, (act(x), act(x), me), cells, *s, 0.0)?,
        Op::Softcap { x, cap } => elementwise(Elt::Softcap, (act(x), act(x), me), cells, *cap, 1.0 / *cap)?,
        Op::TempScale { x, params: tp } => {
            let p = kernels::TempScaleParamsGpu {
                cols: u32_of(cols, "columns")?,
                n: u32_of(cells, "elements")?,
                pos_off: st.positions,
                floor_scale: tp.floor_scale,
                scale: tp.scale,
                offset: tp.offset,
            };
            one(kernels::temp_scale(), vec![act(x), Res::Step, me], bytes(&p), threads_groups(cells)?)
        }
        Op::Glu { gate, up, act: f } => match fx.glu_q8.get(&i) {
            Some(&crate::fusion::GluQ8 { group, out, gate_slice, up_slice, up_norm }) => {
                let (q, qs) =
                    super::norm::quant_outputs(i as u32, group, out, rows, cols, temp_bytes, qact_of, f16_bufs)?;
                let n_words = u32_of(cells / 4, "elements")?;
                let (a, a_parts, a_stride) = match gate_slice {
                    Some(sl) => (Res::Act(sl.x.0), 1, 0),
                    None => super::norm::read_planes(*gate, f16_bufs),
                };
                let (b, b_parts, b_stride) = match (up_slice, up_norm) {
                    (Some(sl), _) => (Res::Act(sl.x.0), 1, 0),
                    (None, Some(n)) => super::norm::read_planes(n.x, f16_bufs),
                    (None, None) => super::norm::read_planes(*up, f16_bufs),
                };
                // (vec4s per row of the sliced tensor, per slice, per period, first vec4), or 0s.
                let words = |sl: Option<crate::fusion::ColSlice>| {
                    sl.map_or([0; 4], |sl| [sl.in_cols / 4, sl.len / 4, sl.period / 4, sl.offset / 4])
                };
                let ([a_row_words, a_len_words, a_period_words, a_off_words], bw) =
                    (words(gate_slice), words(up_slice));
                let p = fused_kernels::GluQ8Params {
                    n_words,
                    group,
                    scale_off: n_words / 4,
                    ab_words: 0,
                    a_parts,
                    a_stride,
                    b_parts,
                    b_stride,
                    row_words: u32_of(cols / 4, "columns")?,
                    b_row_words: bw[0],
                    b_off_words: bw[3],
                    b_norm_words: up_norm.map_or(0, |n| n.group / 4),
                    b_norm_eps: up_norm.map_or(0.0, |n| n.eps),
                    b_len_words: bw[1],
                    b_period_words: bw[2],
                    a_row_words,
                    a_len_words,
                    a_period_words,
                    a_off_words,
                };
                let mut res = vec![a, b, me, q, qs];
                if let Some(n) = up_norm {
                    res.push(vector_of(weights, i, &n.weight, n.group as usize)?);
                }
                one(fused_kernels::glu_q8(*f, out, up_norm.is_some()), res, bytes(&p), n_words.div_ceil(64))
            }
            None => elementwise(Elt::Glu(*f), (act(gate), act(up), me), cells, 0.0, 0.0)?,
        },
        Op::OutputRows { x } => {
            let p = kernels::GatherParams { cols: cols as u32, n_out: rows as u32, rows_off: st.output_rows };
            one(kernels::gather_rows(), vec![act(x), Res::Step, me], bytes(&p), threads_groups(cells)?)
        }
        other => return Err(VkError::Unsupported(format!("node {i}: {} is not a pointwise op", other.name()))),
    };
    Ok(vec![e])
}

/// `Op::Rope` of node `i` (`rows` x `cols`) with its frequency factors, if any.
pub(super) fn rope(
    i: usize,
    x: TensorId,
    rp: &RopeParams,
    rows: usize,
    cols: usize,
    st: &StepLayout,
    weights: &HashMap<WeightId, GpuWeight>,
) -> VkResult<Vec<Emit>> {
    let rope = rope_gpu(rp)?;
    let ff = match &rp.freq_factors {
        Some(f) => vector_of(weights, i, f, rp.n_rot as usize / 2)?,
        None => Res::Dummy,
    };
    let p = kernels::RopeParamsGpu {
        rope,
        cols: cols as u32,
        head_dim: rp.head_dim,
        n_rows: rows as u32,
        pos_off: st.positions,
    };
    let res = vec![Res::Act(x.0), Res::Act(i as u32), Res::Step, ff];
    Ok(vec![one(kernels::rope(), res, bytes(&p), threads_groups(rows * cols / 2)?)])
}
