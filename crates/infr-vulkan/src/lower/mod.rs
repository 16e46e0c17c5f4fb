//! Lowering a graph to dispatches: for each node, which kernel runs with which buffers,
//! push constants and grid. Pure bookkeeping; recording happens in `plan`.

use std::collections::HashMap;
use std::sync::Arc;

use infr_core::{Graph, KvSpec, Op, RopeMode, RopeScaling, WeightId};

use crate::error::{VkError, VkResult};
use crate::fused_kernels;
use crate::fusion::{self, FusionOptions};
use crate::kernels::{self, Elt};
use crate::pipeline::{KernelSpec, Pipeline, Pipelines};
use crate::prefill_matmul;
use crate::profile::OpLabel;
use crate::weights::GpuWeight;

pub(crate) use crate::features::Features;

mod attention;
mod matmul;
mod moe;
mod recurrent;

use matmul::q8_info;

/// A buffer a dispatch binds, resolved to a `vk::Buffer` range when recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Res {
    /// The output region of a node.
    Act(u32),
    /// Row chunk `1` of weight `0`.
    WeightChunk(WeightId, usize),
    /// The f32 copy of a 1-D weight.
    WeightVec(WeightId),
    /// K cache of a layer.
    KvK(u32),
    /// V cache of a layer.
    KvV(u32),
    /// Recurrent state layer `0` (all its slots).
    State(u32),
    /// The step-input buffer.
    Step,
    /// The step's embedding mixture (a flag word, then `n_tokens` rows of `n_vocab` f32).
    Mix,
    /// The i-quant tables.
    Tables,
    /// The plan's scratch buffer (attention partials).
    Scratch,
    /// Temporary buffer number `0` of the plan: int8-quantized or rounded activations, f16
    /// copies of activations and dequantized weights (sized by `Lowered::temp_bytes`).
    Temp(u32),
    /// A placeholder for an unused optional binding.
    Dummy,
}

/// One compute dispatch.
pub(crate) struct Dispatch {
    pub pipeline: Arc<Pipeline>,
    pub res: Vec<Res>,
    pub push: Vec<u8>,
    /// Total workgroups (laid out as a 2-D grid when recording).
    pub groups: u32,
    pub label: OpLabel,
    /// Whether a barrier follows (false: the next dispatch may run alongside this one; it
    /// must neither read what this one writes nor write what it reads).
    pub barrier_after: bool,
}

/// Offsets (in u32 words) of the step-input arrays inside the step buffer: per token its id,
/// position, sequence index, page-table offset, state slot and window page-table offset; the
/// output rows; the page lists, then the window page lists.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepLayout {
    pub tokens: u32,
    pub positions: u32,
    pub token_seq: u32,
    pub output_rows: u32,
    pub tok_pages: u32,
    pub tok_state: u32,
    /// Per token: the offset of its sequence's window page list (windowed layers).
    pub tok_wpages: u32,
    pub pages: u32,
}

impl StepLayout {
    pub fn new(n_tokens: usize, n_outputs: usize) -> Self {
        let n = n_tokens as u32;
        let o = n_outputs as u32;
        Self {
            tokens: 0,
            positions: n,
            token_seq: 2 * n,
            output_rows: 3 * n,
            tok_pages: 3 * n + o,
            tok_state: 4 * n + o,
            tok_wpages: 5 * n + o,
            pages: 6 * n + o,
        }
    }
}

/// A push-constant block as bytes.
pub(crate) fn bytes<T: bytemuck::Pod>(p: &T) -> Vec<u8> {
    bytemuck::bytes_of(p).to_vec()
}

fn threads_groups(threads: usize) -> VkResult<u32> {
    u32::try_from(threads.div_ceil(64)).map_err(|_| VkError::Unsupported(format!("{threads} threads in one dispatch")))
}

/// The dispatch of `out = op(a, b)` over `cells` elements (`s`, `inv_s`: the op's scalar and
/// its inverse where it has one): kernel, bindings, push constants, workgroups.
fn elementwise(
    op: Elt,
    (a, b, out): (Res, Res, Res),
    cells: usize,
    s: f32,
    inv_s: f32,
) -> VkResult<(KernelSpec, Vec<Res>, Vec<u8>, u32)> {
    let p = kernels::EltParams { n: u32_of(cells, "elements")?, s, inv_s };
    let (spec, groups) = kernels::elementwise(op, cells);
    Ok((spec, vec![a, b, out], bytes(&p), groups))
}

/// `v` as u32, or an error naming `what` that does not fit.
pub(crate) fn u32_of(v: usize, what: &str) -> VkResult<u32> {
    u32::try_from(v).map_err(|_| VkError::Unsupported(format!("{what} = {v} exceeds u32")))
}

/// The RoPE fields of the kernels' push constants (`ggml_rope_yarn_corr_dims` and friends).
fn rope_gpu(rp: &infr_core::RopeParams) -> VkResult<kernels::RopeGpu> {
    if rp.head_dim % 2 != 0 || rp.n_rot % 2 != 0 || rp.n_rot == 0 {
        return Err(VkError::Unsupported(format!("rope with head_dim {} / n_rot {}", rp.head_dim, rp.n_rot)));
    }
    let nd = rp.n_rot as f32;
    let (ext_factor, mscale0, corr, yarn_mul) = match rp.scaling {
        RopeScaling::None => (0.0, 1.0, [0.0, 0.0], 1.0),
        RopeScaling::Yarn { ext_factor, attn_factor, beta_fast, beta_slow, n_ctx_orig } => {
            let start = corr_dim(nd, n_ctx_orig as f32, beta_fast, rp.freq_base).floor();
            let end = corr_dim(nd, n_ctx_orig as f32, beta_slow, rp.freq_base).ceil();
            (ext_factor, attn_factor, [start.max(0.0), end.min(nd - 1.0)], 1.0 + 0.1 * (1.0 / rp.freq_scale).ln())
        }
    };
    Ok(kernels::RopeGpu {
        theta_scale: rp.freq_base.powf(-2.0 / nd),
        freq_scale: rp.freq_scale,
        ext_factor,
        mscale0,
        corr0: corr[0],
        corr1: corr[1],
        yarn_mul,
        has_ff: rp.freq_factors.is_some() as u32,
        n_rot: rp.n_rot,
        neox: (rp.mode == RopeMode::Neox) as u32,
    })
}

/// `ggml_rope_yarn_corr_dim`.
fn corr_dim(n_dims: f32, n_ctx_orig: f32, n_rot: f32, base: f32) -> f32 {
    n_dims * (n_ctx_orig / (n_rot * 2.0 * std::f32::consts::PI)).ln() / (2.0 * base.ln())
}

/// Whether the lowering can run `op` (the shape rules its kernels have, checked before a
/// model is loaded; see `Backend::supports`).
pub(crate) fn supports(op: &Op) -> Result<(), String> {
    match op {
        Op::Rope { params, .. } => rope_gpu(params).map(|_| ()).map_err(|e| e.to_string()),
        Op::Attention { params: ap, .. } if ap.head_dim_k % 2 != 0 || ap.head_dim_v % 2 != 0 => {
            Err(format!("attention with odd head dims {} / {}", ap.head_dim_k, ap.head_dim_v))
        }
        Op::Moe { params, .. } => moe::unsupported(params).map_or(Ok(()), Err),
        Op::Attention { params: ap, .. } if ap.bidirectional && ap.chunk.is_some() => {
            Err("bidirectional chunked attention".into())
        }
        Op::Attention { params: ap, .. } if ap.window.is_some_and(|w| w >= kernels::ATTN_BIDIR) => {
            Err(format!("attention window of {} positions", ap.window.unwrap_or(0)))
        }
        Op::Conv1d { .. } | Op::DeltaNet { .. } => recurrent::unsupported(op).map_or(Ok(()), Err),
        Op::Attention { params: ap, .. } if ap.chunk.or(ap.window).is_some_and(|c| c >= kernels::ATTN_CHUNKED) => {
            Err(format!("attention window or chunks of {} positions", ap.chunk.or(ap.window).unwrap_or(0)))
        }
        _ => Ok(()),
    }
}

/// A lowered graph: its dispatches and the extra buffers they need.
pub(crate) struct Lowered {
    pub dispatches: Vec<Dispatch>,
    /// Bytes of the attention scratch buffer.
    pub scratch_bytes: u64,
    /// Bytes of each temporary buffer (`Res::Temp(i)`).
    pub temp_bytes: Vec<u64>,
    /// For every node, the last node index whose dispatch reads it (after fusion).
    pub last_uses: Vec<usize>,
    /// The vocabulary of the graph's embedding mixture, if it has one (sizes `Res::Mix`).
    pub mix_vocab: Option<usize>,
}

/// Lower every node of `graph` to dispatches.
pub(crate) fn lower(
    graph: &Graph,
    weights: &HashMap<WeightId, GpuWeight>,
    kv: Option<&KvSpec>,
    pipes: &mut Pipelines,
    feat: Features,
) -> VkResult<Lowered> {
    let mut scratch = 0u64;
    let mut temp_bytes: Vec<u64> = Vec::new();
    let mut mix_vocab = None;
    // (Input node, blocks per scale) → its int8-quantized copy (q/k/v and gate/up share one).
    let mut qact_of: HashMap<(u32, u32), u32> = HashMap::new();
    // Activations rounded for the float matmul kernels (f32 copy).
    let mut rounded = prefill_matmul::RoundedCopy::default();
    let mut f16_bufs = prefill_matmul::F16Buffers::default();
    let mut moe_temps = None;
    let st = StepLayout::new(graph.n_tokens, graph.n_outputs);
    let mut out = Vec::new();
    let n_tok = graph.n_tokens;
    let fopts = FusionOptions {
        quantizing: feat.fusion && feat.int8,
        qk_rope: feat.fusion && feat.max_bindings >= fused_kernels::qk_rope(infr_core::KvDType::F16, 64).bindings,
        gemv_jobs: feat.fusion && feat.int8 && feat.max_bindings >= 5 + 3 * (kernels::MAX_GEMV_JOBS as u32 - 1),
    };
    let fx = fusion::plan(graph, fopts, |j| {
        let node = &graph.nodes[j];
        match &node.op {
            Op::Linear { weight, .. } => weights.get(weight).and_then(|lw| q8_info(lw, node.rows, feat)),
            Op::Moe { x, params, .. } => moe::int8_input(params, node.rows, graph.node(*x).cols, feat, weights),
            _ => None,
        }
    });
    // The matmuls that take the f16 path, in order (each prefetches the next one's weight).
    let f16_order: Vec<(usize, WeightId)> = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| match &node.op {
            Op::Linear { weight, .. } if !fx.absorbed[i] => {
                weights.get(weight).and_then(|lw| prefill_matmul::eligible(feat, lw, node.rows)).map(|_| (i, *weight))
            }
            _ => None,
        })
        .collect();
    for (i, node) in graph.nodes.iter().enumerate() {
        if fx.absorbed[i] {
            continue;
        }
        let me = Res::Act(i as u32);
        let node_label = node.label.clone().unwrap_or_else(|| node.op.name().to_owned());
        let mut push_with = |spec: &KernelSpec,
                             res: Vec<Res>,
                             push: Vec<u8>,
                             groups: u32,
                             shape: Option<String>,
                             barrier_after: bool| {
            let pipeline = pipes.get(spec)?;
            let label = OpLabel { node: node_label.clone(), kernel: spec.name.clone(), shape };
            out.push(Dispatch { pipeline, res, push, groups, label, barrier_after });
            VkResult::Ok(())
        };
        let mut push = |spec: &KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32, shape: Option<String>| {
            push_with(spec, res, push, groups, shape, true)
        };
        let w = |id: &WeightId| {
            weights.get(id).ok_or_else(|| {
                VkError::Unsupported(format!("node {i} ({}): weight {} not loaded", node.op.name(), id.0))
            })
        };
        let vec_of = |id: &WeightId, len: usize| -> VkResult<Res> {
            let gw = w(id)?;
            if gw.vec_len() != Some(len) {
                return Err(VkError::Unsupported(format!("node {i}: weight {} is not a vector of {len}", id.0)));
            }
            Ok(Res::WeightVec(*id))
        };
        let cells = node.rows * node.cols;
        if let Err(why) = supports(&node.op) {
            return Err(VkError::Unsupported(format!("node {i}: {why}")));
        }
        match &node.op {
            Op::MixEmbed { table } => {
                let tw = w(table)?;
                if tw.chunks.is_empty() {
                    return Err(VkError::Unsupported(format!("node {i}: weight {} has no matrix form", table.0)));
                }
                let n_vocab = u32_of(tw.rows, "vocabulary")?;
                mix_vocab = Some(tw.rows);
                let spec = kernels::mix_embed(&tw.layout);
                let cols = u32_of(tw.cols, "embedding width")?;
                let tiles = n_tok.div_ceil(kernels::MIX_EMBED_TOKENS);
                let max_slices = tw.chunks.iter().map(|c| kernels::mix_embed_slices(c.rows as usize).0).max();
                let ti = temp_bytes.len() as u32;
                temp_bytes.push((max_slices.unwrap_or(1) * n_tok * tw.cols * 4) as u64);
                for (c, ch) in tw.chunks.iter().enumerate() {
                    let (slices, slice_rows) = kernels::mix_embed_slices(ch.rows as usize);
                    let p = kernels::MixEmbedParams {
                        cols,
                        row0: ch.row0,
                        rows: ch.rows,
                        soff: ch.soff_words,
                        n_tokens: n_tok as u32,
                        n_vocab,
                        slice_rows: slice_rows as u32,
                    };
                    let res = vec![Res::WeightChunk(*table, c), Res::Mix, Res::Temp(ti), Res::Tables];
                    push(&spec, res, bytes(&p), threads_groups(slices * tiles * tw.cols / 4)?, None)?;
                    let n_words = n_tok * tw.cols / 4;
                    let r = kernels::MixReduceParams {
                        n_words: n_words as u32,
                        slices: slices as u32,
                        accumulate: (c > 0) as u32,
                    };
                    push(&kernels::mix_reduce(), vec![Res::Temp(ti), me], bytes(&r), threads_groups(n_words)?, None)?;
                }
            }
            Op::Embed { table } => {
                let tw = w(table)?;
                if tw.chunks.is_empty() {
                    return Err(VkError::Unsupported(format!("node {i}: weight {} has no matrix form", table.0)));
                }
                let spec = kernels::embed(&tw.layout);
                for (c, ch) in tw.chunks.iter().enumerate() {
                    let p = kernels::EmbedParams {
                        cols: u32_of(tw.cols, "embedding width")?,
                        row0: ch.row0,
                        rows: ch.rows,
                        soff: ch.soff_words,
                        n_tokens: n_tok as u32,
                        tok_off: st.tokens,
                    };
                    let res = vec![Res::WeightChunk(*table, c), Res::Step, me, Res::Tables];
                    push(&spec, res, bytes(&p), threads_groups(n_tok * tw.cols / 4)?, None)?;
                }
            }
            Op::Linear { x, weight, bias } => {
                let mut side = matmul::Side {
                    temp_bytes: &mut temp_bytes,
                    qact_of: &mut qact_of,
                    rounded: &mut rounded,
                    f16_bufs: &mut f16_bufs,
                };
                let node =
                    matmul::LinearNode { index: i, x: *x, weight: *weight, bias: *bias, out: me, rows: node.rows };
                for e in matmul::lower_linear(graph, &node, &fx, &f16_order, feat, weights, &mut side)? {
                    push_with(&e.spec, e.res, e.push, e.groups, e.shape, e.barrier_after)?;
                }
            }
            Op::RmsNorm { x, weight, eps, group } => {
                let wres = match weight {
                    Some(wid) => vec_of(wid, *group as usize)?,
                    None => Res::Dummy,
                };
                if let Some(nq) = fx.norm_q8.get(&i) {
                    let qi = temp_bytes.len() as u32;
                    temp_bytes.push(kernels::qact_bytes(node.rows, node.cols));
                    qact_of.insert((i as u32, nq.group), qi);
                    let p = fused_kernels::NormQ8Params {
                        k: node.cols as u32,
                        n_rows: node.rows as u32,
                        eps: *eps,
                        has_weight: weight.is_some() as u32,
                        has_add: nq.add.is_some() as u32,
                        group: nq.group,
                        scale_off: (cells / 16) as u32,
                    };
                    let (a, b, sum) = match nq.add {
                        Some((a, b)) => (Res::Act(a.0), Res::Act(b.0), Res::Act(x.0)),
                        None => (Res::Act(x.0), Res::Dummy, Res::Dummy),
                    };
                    let res = vec![a, b, sum, me, wres, Res::Temp(qi), Res::Temp(qi)];
                    let groups = u32_of(node.rows * (node.cols / 4).div_ceil(256), "norm groups")?;
                    push(&fused_kernels::norm_q8(), res, bytes(&p), groups, None)?;
                    continue;
                }
                let n_groups = u32_of(cells / *group as usize, "norm groups")?;
                let p = kernels::NormParams { group: *group, n_groups, eps: *eps, has_weight: weight.is_some() as u32 };
                push(&kernels::rms_norm(), vec![Res::Act(x.0), me, wres], bytes(&p), n_groups, None)?;
            }
            Op::Rope { x, params: rp } => {
                let rope = rope_gpu(rp)?;
                let ff = match &rp.freq_factors {
                    Some(f) => vec_of(f, rp.n_rot as usize / 2)?,
                    None => Res::Dummy,
                };
                let p = kernels::RopeParamsGpu {
                    rope,
                    cols: node.cols as u32,
                    head_dim: rp.head_dim,
                    n_rows: node.rows as u32,
                    pos_off: st.positions,
                };
                let res = vec![Res::Act(x.0), me, Res::Step, ff];
                push(&kernels::rope(), res, bytes(&p), threads_groups(cells / 2)?, None)?;
            }
            Op::Attention { q, k, v, params: ap } => {
                let n = attention::AttnNode {
                    index: i,
                    q: *q,
                    k: *k,
                    v: *v,
                    params: ap,
                    out: me,
                    rows: node.rows,
                    cols: node.cols,
                };
                let mut side =
                    attention::Side { scratch: &mut scratch, temp_bytes: &mut temp_bytes, qact_of: &mut qact_of };
                for e in attention::lower(graph, &n, &fx, kv, &st, feat, weights, &mut side)? {
                    push_with(&e.spec, e.res, e.push, e.groups, e.shape, e.barrier_after)?;
                }
            }
            Op::Add { a, b } | Op::Mul { a, b } => {
                let op = if matches!(node.op, Op::Add { .. }) { Elt::Add } else { Elt::Mul };
                let (spec, res, p, groups) = elementwise(op, (Res::Act(a.0), Res::Act(b.0), me), cells, 0.0, 0.0)?;
                push(&spec, res, p, groups, None)?;
            }
            Op::Scale { x, s } => {
                let (spec, res, p, groups) =
                    elementwise(Elt::Scale, (Res::Act(x.0), Res::Act(x.0), me), cells, *s, 0.0)?;
                push(&spec, res, p, groups, None)?;
            }
            Op::TempScale { x, params: tp } => {
                let p = kernels::TempScaleParamsGpu {
                    cols: u32_of(node.cols, "columns")?,
                    n: u32_of(cells, "elements")?,
                    pos_off: st.positions,
                    floor_scale: tp.floor_scale,
                    scale: tp.scale,
                    offset: tp.offset,
                };
                let res = vec![Res::Act(x.0), Res::Step, me];
                push(&kernels::temp_scale(), res, bytes(&p), threads_groups(cells)?, None)?;
            }
            Op::Softcap { x, cap } => {
                let io = (Res::Act(x.0), Res::Act(x.0), me);
                let (spec, res, p, groups) = elementwise(Elt::Softcap, io, cells, *cap, 1.0 / *cap)?;
                push(&spec, res, p, groups, None)?;
            }
            Op::Glu { gate, up, act } => {
                if let Some(&group) = fx.glu_q8.get(&i) {
                    let qi = temp_bytes.len() as u32;
                    temp_bytes.push(kernels::qact_bytes(node.rows, node.cols));
                    qact_of.insert((i as u32, group), qi);
                    let n_words = u32_of(cells / 4, "elements")?;
                    let p = fused_kernels::GluQ8Params { n_words, group, scale_off: n_words / 4, ab_words: 0 };
                    let res = vec![Res::Act(gate.0), Res::Act(up.0), me, Res::Temp(qi), Res::Temp(qi)];
                    push(&fused_kernels::glu_q8(*act), res, bytes(&p), n_words.div_ceil(64), None)?;
                    continue;
                }
                let io = (Res::Act(gate.0), Res::Act(up.0), me);
                let (spec, res, p, groups) = elementwise(Elt::Glu(*act), io, cells, 0.0, 0.0)?;
                push(&spec, res, p, groups, None)?;
            }
            Op::Moe { x, logits, params } => {
                let m = moe::MoeNode {
                    x: *x,
                    logits: *logits,
                    p: params,
                    n_tokens: node.rows,
                    cols: graph.node(*x).cols,
                    out_cols: node.cols,
                    out: me,
                };
                let side = moe::Side {
                    temps: &mut moe_temps,
                    temp_bytes: &mut temp_bytes,
                    rounded: &mut rounded,
                    qact_of: &qact_of,
                };
                for e in moe::lower(&m, weights, feat, side)? {
                    push_with(&e.spec, e.res, e.push, e.groups, e.shape, e.barrier_after)?;
                }
            }
            Op::SliceCols { period, offset, len, .. } => {
                let e = recurrent::slice_cols(graph, i, *period, *offset, *len)?;
                push(&e.spec, e.res, e.push, e.groups, None)?;
            }
            Op::Conv1d { params, .. } => {
                for e in recurrent::conv1d(graph, i, params, weights, kv, &st)? {
                    push(&e.spec, e.res, e.push, e.groups, None)?;
                }
            }
            Op::DeltaNet { params, .. } => {
                let e = recurrent::delta_net(graph, i, params, weights, kv, &st, feat)?;
                push(&e.spec, e.res, e.push, e.groups, None)?;
            }
            Op::OutputRows { x } => {
                let p =
                    kernels::GatherParams { cols: node.cols as u32, n_out: node.rows as u32, rows_off: st.output_rows };
                push(
                    &kernels::gather_rows(),
                    vec![Res::Act(x.0), Res::Step, me],
                    bytes(&p),
                    threads_groups(cells)?,
                    None,
                )?;
            }
        }
    }
    Ok(Lowered { dispatches: out, scratch_bytes: scratch, temp_bytes, last_uses: fx.last_uses, mix_vocab })
}

/// Byte offsets of every node's output in one activation buffer, reusing the space of
/// tensors after their last reader (first fit). Returns (offsets, total bytes).
pub(crate) fn allocate_activations(graph: &Graph, last: &[usize], align: u64) -> (Vec<u64>, u64) {
    let mut live: Vec<(u64, u64, usize)> = Vec::new(); // (offset, size, node)
    let mut offsets = vec![0u64; graph.nodes.len()];
    let mut high = 0u64;
    for (i, node) in graph.nodes.iter().enumerate() {
        live.retain(|&(_, _, n)| last[n] >= i);
        let size = ((node.rows * node.cols * 4) as u64).max(16).next_multiple_of(align);
        live.sort_by_key(|&(o, _, _)| o);
        let mut at = 0u64;
        for &(o, s, _) in &live {
            if o >= at + size {
                break;
            }
            at = at.max((o + s).next_multiple_of(align));
        }
        offsets[i] = at;
        high = high.max(at + size);
        live.push((at, size, i));
    }
    (offsets, high)
}
