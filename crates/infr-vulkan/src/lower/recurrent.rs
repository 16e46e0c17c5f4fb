//! Lowering of the column slice and the recurrent ops (causal conv, gated delta rule): one
//! dispatch each; the recurrent kernels read and write the state layers' slots in place.

use std::collections::HashMap;

use infr_core::{Conv1dParams, DeltaNetParams, Graph, KvSpec, Op, WeightId};

use super::{bytes, threads_groups, u32_of, Features, Res, StepLayout};
use crate::error::{VkError, VkResult};
use crate::fusion::DeltaInputs;
use crate::prefill_matmul::Emit;
use crate::recurrent_kernels::{self as rk, ConvPass, CONV_MAX_KERNEL, DELTA_NET_HEAD_DIMS};
use crate::weights::GpuWeight;

/// Why the Vulkan lowering cannot run this op, if it cannot (checked up front).
pub(super) fn unsupported(op: &Op) -> Option<String> {
    match op {
        Op::Conv1d { params, .. } if params.kernel > CONV_MAX_KERNEL => {
            Some(format!("convolution of {} taps (at most {CONV_MAX_KERNEL})", params.kernel))
        }
        Op::DeltaNet { params, .. } if !DELTA_NET_HEAD_DIMS.contains(&params.head_dim) => {
            Some(format!("delta rule with head dim {}", params.head_dim))
        }
        _ => None,
    }
}

fn emit(spec: crate::pipeline::KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32) -> Emit {
    Emit { spec, res, push, groups, shape: None }
}

/// `SliceCols` of node `i`.
pub(super) fn slice_cols(graph: &Graph, i: usize, period: u32, offset: u32, len: u32) -> VkResult<Emit> {
    let node = &graph.nodes[i];
    let Op::SliceCols { x, .. } = node.op else { unreachable!("slice_cols lowering of another op") };
    let cells = node.rows() * node.cols();
    let p = rk::SliceColsParams {
        n: u32_of(cells, "elements")?,
        in_cols: u32_of(graph.node(x).cols(), "columns")?,
        out_cols: u32_of(node.cols(), "columns")?,
        period,
        offset,
        len,
    };
    Ok(emit(rk::slice_cols(), vec![Res::Act(x.0), Res::Act(i as u32)], bytes(&p), threads_groups(cells)?))
}

fn state_floats(kv: Option<&KvSpec>, layer: u32, want: u64, what: &str) -> VkResult<u32> {
    let kv = kv.ok_or_else(|| VkError::Unsupported(format!("{what} before init_kv")))?;
    let l = kv
        .states
        .get(layer as usize)
        .ok_or_else(|| VkError::Unsupported(format!("{what} reads state layer {layer} of {}", kv.states.len())))?;
    if l.floats as u64 != want {
        return Err(VkError::Unsupported(format!("{what}: state layer {layer} holds {} floats, not {want}", l.floats)));
    }
    Ok(l.floats)
}

/// `Conv1d` of node `i`: one walking dispatch for steps of few rows, else outputs then state.
pub(super) fn conv1d(
    graph: &Graph,
    i: usize,
    p: &Conv1dParams,
    weights: &HashMap<WeightId, GpuWeight>,
    kv: Option<&KvSpec>,
    st: &StepLayout,
) -> VkResult<Vec<Emit>> {
    let node = &graph.nodes[i];
    let Op::Conv1d { x, .. } = node.op else { unreachable!("conv1d lowering of another op") };
    if let Some(why) = unsupported(&node.op) {
        return Err(VkError::Unsupported(why));
    }
    let c = node.cols();
    let w = weights.get(&p.weight).ok_or_else(|| VkError::Unsupported(format!("conv1d: weight {}", p.weight.0)))?;
    if w.vec_elems() != Some(c * p.kernel as usize) {
        return Err(VkError::Unsupported(format!("conv1d: weight {} is not {c} x {} floats", p.weight.0, p.kernel)));
    }
    let floats = state_floats(kv, p.state, (p.kernel as u64 - 1) * c as u64, "conv1d")?;
    let gp = rk::Conv1dParamsGpu {
        n_tokens: u32_of(node.rows(), "tokens")?,
        channels: u32_of(c, "channels")?,
        kernel: p.kernel,
        silu: p.silu as u32,
        pos_off: st.positions,
        seq_off: st.token_seq,
        state_off: st.tok_state,
        slot_floats: floats,
    };
    let res = vec![Res::Act(x.0), Res::WeightVec(p.weight), Res::Step, Res::State(p.state), Res::Act(i as u32)];
    let groups = threads_groups(node.rows() * c)?;
    if node.rows() <= rk::CONV_WALK_MAX_ROWS {
        return Ok(vec![emit(rk::conv1d(ConvPass::Walk), res, bytes(&gp), groups)]);
    }
    Ok(vec![
        emit(rk::conv1d(ConvPass::Outputs), res.clone(), bytes(&gp), groups),
        emit(rk::conv1d(ConvPass::State), res, bytes(&gp), groups),
    ])
}

/// `DeltaNet` of node `i`: the recurrence token by token (reading q, k and v in place where
/// the fusion plan says so, `fused`), or for steps of `feat.delta_chunk_min` tokens and more
/// its chunked form (two dispatches over a plan temporary that every delta-rule node of the
/// plan shares, `scratch`).
#[allow(clippy::too_many_arguments)]
pub(super) fn delta_net(
    graph: &Graph,
    i: usize,
    p: &DeltaNetParams,
    fused: Option<&DeltaInputs>,
    weights: &HashMap<WeightId, GpuWeight>,
    kv: Option<&KvSpec>,
    st: &StepLayout,
    feat: Features,
    (scratch, temp_bytes): (&mut Option<u32>, &mut Vec<u64>),
) -> VkResult<Vec<Emit>> {
    let node = &graph.nodes[i];
    let Op::DeltaNet { q, k, v, alpha, beta, .. } = node.op else { unreachable!("delta_net lowering of another op") };
    // What both forms read first: q, k, v, alpha, beta, the decays and the step inputs.
    let inputs = [
        Res::Act(q.0),
        Res::Act(k.0),
        Res::Act(v.0),
        Res::Act(alpha.0),
        Res::Act(beta.0),
        Res::WeightVec(p.decay),
        Res::Step,
    ];
    if let Some(why) = unsupported(&node.op) {
        return Err(VkError::Unsupported(why));
    }
    let d = p.head_dim as u64;
    state_floats(kv, p.state, p.n_v_head as u64 * d * d, "delta_net")?;
    let decay = weights.get(&p.decay).and_then(GpuWeight::vec_len);
    if decay != Some(p.n_v_head as usize) {
        return Err(VkError::Unsupported(format!("delta_net: decay {} is not {} floats", p.decay.0, p.n_v_head)));
    }
    let gp = rk::DeltaNetParamsGpu {
        n_tokens: u32_of(node.rows(), "tokens")?,
        n_k_head: p.n_k_head,
        n_v_head: p.n_v_head,
        scale: p.scale,
        pos_off: st.positions,
        seq_off: st.token_seq,
        state_off: st.tok_state,
        pad: 0,
    };
    let shape = rk::delta_net_shape(p.head_dim, feat.min_subgroup, feat.delta_shape);
    let groups = rk::delta_net_groups(p.head_dim, shape, node.rows() as u64, p.n_v_head as u64);
    let groups = u32::try_from(groups).map_err(|_| VkError::Unsupported(format!("{groups} delta-rule workgroups")))?;
    let chunked = fused.is_none()
        && feat.delta_chunk_min > 0
        && node.rows() >= feat.delta_chunk_min as usize
        && rk::delta_chunked_fits(p.head_dim, feat.shuffles4);
    if chunked {
        let words = rk::delta_scratch_words(node.rows() as u64, p.n_v_head as u64, d);
        let t = *scratch.get_or_insert_with(|| {
            temp_bytes.push(16);
            temp_bytes.len() as u32 - 1
        });
        crate::prefill_matmul::grow_temp(temp_bytes, t, words * 4);
        let pp = rk::DeltaPrepParams {
            n_tokens: gp.n_tokens,
            n_k_head: p.n_k_head,
            n_v_head: p.n_v_head,
            pos_off: st.positions,
            seq_off: st.token_seq,
            pad: [0; 3],
        };
        let prep_groups = u32_of(node.rows() * p.n_v_head as usize, "delta-rule chunk workgroups")?;
        let chunked_shape = rk::DeltaShape { lanes: rk::DELTA_CHUNKED_LANES, rows: rk::DELTA_CHUNKED_ROWS };
        let chunked_groups = u32_of(
            rk::delta_net_groups(p.head_dim, chunked_shape, node.rows() as u64, p.n_v_head as u64) as usize,
            "delta-rule workgroups",
        )?;
        let prep = [&inputs[..], &[Res::Temp(t)]].concat();
        let run = vec![Res::Act(q.0), Res::Act(k.0), Res::Temp(t), Res::Step, Res::State(p.state), Res::Act(i as u32)];
        return Ok(vec![
            emit(rk::delta_prep(p.head_dim), prep, bytes(&pp), prep_groups),
            emit(rk::delta_chunked(p.head_dim), run, bytes(&gp), chunked_groups),
        ]);
    }
    let qk_cols = u32_of(graph.node(q).cols(), "columns")?;
    let (mut inputs, mut sp) = (
        inputs.to_vec(),
        rk::DeltaStepParamsGpu {
            base: gp,
            qk_stride: qk_cols,
            v_stride: u32_of(graph.node(v).cols(), "columns")?,
            q_off: 0,
            k_off: 0,
            v_off: 0,
            pad: 0,
            q_mult: 1.0,
            q_eps: 0.0,
            k_mult: 1.0,
            k_eps: 0.0,
        },
    );
    if let Some(f) = fused {
        let stride = u32_of(graph.node(f.x).cols(), "columns")?;
        (sp.qk_stride, sp.v_stride) = (stride, stride);
        [sp.q_off, sp.k_off, sp.v_off] = f.offsets;
        (sp.q_mult, sp.q_eps, sp.k_mult, sp.k_eps) = (f.q_l2.mult, f.q_l2.eps, f.k_l2.mult, f.k_l2.eps);
        inputs[..3].fill(Res::Act(f.x.0));
    }
    let res = [&inputs[..], &[Res::State(p.state), Res::Act(i as u32)]].concat();
    let block = rk::delta_block_tokens(p.head_dim, shape, feat.shared_bytes, feat.delta_block);
    let spec = rk::delta_net(p.head_dim, shape, block, fused.is_some());
    Ok(vec![emit(spec, res, bytes(&sp), groups)])
}
