//! Lowering a graph to dispatches: for each node, which kernel runs with which buffers,
//! push constants and grid. Pure bookkeeping; recording happens in `plan`.

use std::collections::HashMap;
use std::sync::Arc;

use infr_core::{Graph, KvSpec, Op, RopeMode, RopeScaling, WeightId};

use crate::error::{VkError, VkResult};
use crate::fused_kernels;
use crate::fusion::{self, FusionOptions};
use crate::kernels;
use crate::pipeline::{KernelSpec, Pipeline, Pipelines};
use crate::prefill_matmul;
use crate::profile::OpLabel;
use crate::skinny_matmul;
use crate::weights::GpuWeight;

pub(crate) use crate::features::Features;

mod attention;
mod embed;
mod matmul;
mod moe;
mod moe_path;
mod norm;
mod pointwise;
mod recurrent;

use matmul::q8_info;

/// A buffer a dispatch binds, resolved to a `vk::Buffer` range when recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Res {
    /// The output region of a node.
    Act(u32),
    /// Row chunk `1` of weight `0`.
    WeightChunk(WeightId, usize),
    /// The f32 copy of a 1-D weight.
    WeightVec(WeightId),
    /// The device slots of a paged expert tensor (`expert_cache`).
    ExpertSlots(WeightId),
    /// The slot table of a paged expert tensor.
    ExpertTable(WeightId),
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
}

impl Dispatch {
    /// The bindings the dispatch may touch, with whether it may write each: those its kernel
    /// declares, less the placeholder of unused optional ones (binding index, resource).
    pub fn accessed(&self) -> impl Iterator<Item = (usize, Res, bool)> + '_ {
        let p = &self.pipeline;
        self.res
            .iter()
            .enumerate()
            .filter(move |&(b, r)| p.touches(b) && *r != Res::Dummy)
            .map(move |(b, &r)| (b, r, p.may_write(b)))
    }
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
    /// The activations a pipeline stage hands in (`Op::Input`, f32 bits), `hidden_len` words.
    pub hidden: u32,
    pub hidden_len: u32,
    pub pages: u32,
}

impl StepLayout {
    /// The layout of a step of `n_tokens` tokens, `n_outputs` output rows and `hidden_len`
    /// handed-in activations (`Graph::input_elements`).
    pub fn new(n_tokens: usize, n_outputs: usize, hidden_len: usize) -> Self {
        let n = n_tokens as u32;
        let o = n_outputs as u32;
        let h = hidden_len as u32;
        Self {
            tokens: 0,
            positions: n,
            token_seq: 2 * n,
            output_rows: 3 * n,
            tok_pages: 3 * n + o,
            tok_state: 4 * n + o,
            tok_wpages: 5 * n + o,
            hidden: 6 * n + o,
            hidden_len: h,
            pages: 6 * n + o + h,
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

/// Weight `id` of node `i`, or why the plan cannot use it.
pub(super) fn weight_of<'w>(
    weights: &'w HashMap<WeightId, GpuWeight>,
    i: usize,
    id: &WeightId,
) -> VkResult<&'w GpuWeight> {
    weights.get(id).ok_or_else(|| VkError::Unsupported(format!("node {i}: weight {} not loaded", id.0)))
}

/// The f32 copy of node `i`'s 1-D weight `id` as a binding, checked to hold `len` values.
pub(super) fn vector_of(weights: &HashMap<WeightId, GpuWeight>, i: usize, id: &WeightId, len: usize) -> VkResult<Res> {
    if weight_of(weights, i, id)?.vec_len() != Some(len) {
        return Err(VkError::Unsupported(format!("node {i}: weight {} is not a vector of {len}", id.0)));
    }
    Ok(Res::WeightVec(*id))
}

/// A dispatch with no profile shape.
pub(super) fn one(spec: KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32) -> prefill_matmul::Emit {
    prefill_matmul::Emit { spec, res, push, groups, shape: None }
}

/// Hand every dispatch of `emits` to `push` in order.
fn emit_all(
    push: &mut impl FnMut(&KernelSpec, Vec<Res>, Vec<u8>, u32, Option<String>) -> VkResult<()>,
    emits: Vec<prefill_matmul::Emit>,
) -> VkResult<()> {
    for e in emits {
        push(&e.spec, e.res, e.push, e.groups, e.shape)?;
    }
    Ok(())
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

/// Whether the lowering can run `node` (f32 outputs and the shape rules its kernels have,
/// checked before a model is loaded; see `Backend::supports`).
pub(crate) fn supports(node: &infr_core::Node) -> Result<(), String> {
    infr_core::f32_outputs_only(node)?;
    let op = &node.op;
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
    // The chunked delta rule's scratch, shared by the plan's delta-rule nodes.
    let mut delta_scratch: Option<u32> = None;
    let mut mix_vocab = None;
    // (Input node, blocks per scale) → its int8-quantized copy (q/k/v and gate/up share one).
    let mut qact_of: HashMap<(u32, u32), u32> = HashMap::new();
    // Activations rounded for the float matmul kernels (f32 copy).
    let mut rounded = prefill_matmul::RoundedCopy::default();
    let mut f16_bufs = prefill_matmul::F16Buffers::default();
    let mut moe_temps = None;
    let st = StepLayout::new(graph.n_tokens, graph.n_outputs, graph.input_elements());
    let mut out = Vec::new();
    let n_tok = graph.n_tokens;
    // norm_q8 binds 8 storage buffers (the fewest a device may offer is 4).
    let norm_q8_fits = feat.max_bindings >= fused_kernels::norm_q8(fused_kernels::QuantOut::Int8).bindings;
    let fopts = FusionOptions {
        quantizing: feat.fusion && feat.int8 && norm_q8_fits,
        qk_rope: feat.fusion && feat.max_bindings >= fused_kernels::qk_rope(infr_core::KvDType::F16, 64).bindings,
        gemv_jobs: if feat.fusion && feat.int8 { kernels::gemv_jobs_fit(feat.max_bindings) } else { 0 },
        round16: feat.fusion && feat.coopmat.is_some() && norm_q8_fits,
        norm_add: feat.fusion && feat.subgroups,
        v_norm: kv.is_some_and(|k| k.dtype != infr_core::KvDType::Q8_0),
        delta_inputs: feat.fusion,
        delta_chunk_min: feat.delta_chunk_min,
    };
    let q8 = |j: usize| {
        let node = &graph.nodes[j];
        match &node.op {
            Op::Linear { weight, .. } => weights.get(weight).and_then(|lw| q8_info(lw, node.rows(), feat)),
            Op::Moe { x, params, .. } => moe::int8_input(params, node.rows(), graph.node(*x).cols(), feat, weights),
            _ => None,
        }
    };
    let linear_weight = |j: usize| match &graph.nodes[j].op {
        Op::Linear { weight, bias, .. } => weights.get(weight).map(|lw| (lw, bias.is_some(), graph.nodes[j].rows())),
        _ => None,
    };
    let paths = fusion::MatmulPaths {
        q8,
        round16: |j| linear_weight(j).and_then(|(lw, _, n)| skinny_matmul::round16_group(feat, lw, n)),
        split_k: |j| {
            linear_weight(j).is_some_and(|(lw, bias, n)| !bias && skinny_matmul::eligible(feat, lw, n).is_some())
        },
        moe_planes: |j: usize| {
            let node: &infr_core::Node = &graph.nodes[j];
            match &node.op {
                Op::Moe { x, params, .. } => {
                    moe::routed_planes(params, node.rows(), graph.node(*x).cols(), feat, weights)
                }
                _ => false,
            }
        },
    };
    let fx = fusion::plan(graph, fopts, paths);
    // The matmuls that take the f16 path, in order (each prefetches the next one's weight).
    let f16_order: Vec<(usize, WeightId)> = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, node)| match &node.op {
            Op::Linear { weight, .. } if !fx.absorbed[i] => {
                weights.get(weight).and_then(|lw| prefill_matmul::eligible(feat, lw, node.rows())).map(|_| (i, *weight))
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
        let mut push = |spec: &KernelSpec, res: Vec<Res>, push: Vec<u8>, groups: u32, shape: Option<String>| {
            let pipeline = pipes.get(spec)?;
            let weight_bytes = match node.op {
                Op::Linear { .. } => res
                    .iter()
                    .map(|r| match r {
                        Res::WeightChunk(id, c) => weights.get(id).map_or(0, |w| w.chunks[*c].buf.size),
                        _ => 0,
                    })
                    .sum(),
                _ => 0,
            };
            let label = OpLabel { node: node_label.clone(), kernel: spec.name.clone(), shape, weight_bytes };
            out.push(Dispatch { pipeline, res, push, groups, label });
            VkResult::Ok(())
        };
        if let Err(why) = supports(node) {
            return Err(VkError::Unsupported(format!("node {i}: {why}")));
        }
        if let (Some(nq), Op::Add { .. }) = (fx.norm_q8.get(&i), &node.op) {
            let side = (&mut temp_bytes, &mut qact_of, &mut f16_bufs);
            emit_all(&mut push, vec![norm::add_q8(i, nq, (node.rows(), node.cols()), weights, side)?])?;
            continue;
        }
        if let Some(na) = fx.norm_add.get(&i) {
            emit_all(&mut push, vec![norm::norm_add(i, na, node.rows(), node.cols(), weights)?])?;
            continue;
        }
        match &node.op {
            Op::MixEmbed { table } => {
                let (emits, vocab) = embed::mix_embed(i, *table, n_tok, weights, &mut temp_bytes)?;
                mix_vocab = Some(vocab);
                emit_all(&mut push, emits)?;
            }
            Op::Embed { table } => emit_all(&mut push, embed::embed(i, *table, n_tok, &st, weights)?)?,
            Op::Input => emit_all(&mut push, vec![embed::input(graph, i, &st)?])?,
            Op::Linear { x, weight, bias } => {
                let mut side = matmul::Side {
                    temp_bytes: &mut temp_bytes,
                    qact_of: &mut qact_of,
                    rounded: &mut rounded,
                    f16_bufs: &mut f16_bufs,
                };
                let node =
                    matmul::LinearNode { index: i, x: *x, weight: *weight, bias: *bias, out: me, rows: node.rows() };
                emit_all(&mut push, matmul::lower_linear(graph, &node, &fx, &f16_order, feat, weights, &mut side)?)?;
            }
            Op::RmsNorm { x, weight, eps, group } => {
                let n = norm::NormNode {
                    index: i,
                    x: *x,
                    weight: *weight,
                    eps: *eps,
                    group: *group,
                    rows: node.rows(),
                    cols: node.cols(),
                };
                let emits = norm::rms_norm(&n, &fx, weights, &mut temp_bytes, &mut qact_of, &mut f16_bufs)?;
                emit_all(&mut push, emits)?;
            }
            Op::Rope { x, params: rp } => {
                emit_all(&mut push, pointwise::rope(i, *x, rp, node.rows(), node.cols(), &st, weights)?)?
            }
            Op::Attention { q, k, v, params: ap } => {
                let n = attention::AttnNode {
                    index: i,
                    q: *q,
                    k: *k,
                    v: *v,
                    params: ap,
                    out: me,
                    rows: node.rows(),
                    cols: node.cols(),
                };
                let mut side = attention::Side {
                    scratch: &mut scratch,
                    temp_bytes: &mut temp_bytes,
                    qact_of: &mut qact_of,
                    f16_bufs: &mut f16_bufs,
                };
                emit_all(&mut push, attention::lower(graph, &n, &fx, kv, &st, feat, weights, &mut side)?)?;
            }
            Op::Add { .. }
            | Op::Mul { .. }
            | Op::Scale { .. }
            | Op::TempScale { .. }
            | Op::Softcap { .. }
            | Op::Glu { .. }
            | Op::OutputRows { .. } => {
                let (rows, cols) = (node.rows(), node.cols());
                let side = (&mut temp_bytes, &mut qact_of, &mut f16_bufs);
                let emits = pointwise::lower(i, &node.op, rows, cols, &st, &fx, weights, side)?;
                emit_all(&mut push, emits)?;
            }
            Op::Moe { x, logits, params } => {
                let m = moe::MoeNode {
                    index: i as u32,
                    x: *x,
                    logits: *logits,
                    p: params,
                    n_tokens: node.rows(),
                    cols: graph.node(*x).cols(),
                    out_cols: node.cols(),
                    out: me,
                };
                let side = moe::Side {
                    temps: &mut moe_temps,
                    temp_bytes: &mut temp_bytes,
                    rounded: &mut rounded,
                    qact_of: &qact_of,
                    planes: fx.defer_reduce.contains(&i).then_some(&mut f16_bufs),
                };
                emit_all(&mut push, moe::lower(&m, weights, feat, side)?)?;
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
                let side = (&mut delta_scratch, &mut temp_bytes);
                let fused = fx.delta_inputs.get(&i);
                for e in recurrent::delta_net(graph, i, params, fused, weights, kv, &st, feat, side)? {
                    push(&e.spec, e.res, e.push, e.groups, None)?;
                }
            }
        }
    }
    Ok(Lowered { dispatches: out, scratch_bytes: scratch, temp_bytes, mix_vocab })
}
