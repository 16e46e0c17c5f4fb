//! Which nodes of a graph the Vulkan lowering merges into one dispatch (`fused_kernels`),
//! and how that moves the reads of their inputs later (activation memory is reused after a
//! tensor's last reader, so the allocator must see the moved reads).

use std::collections::{HashMap, HashSet};

use infr_core::{AttnParams, Graph, Op, TensorId, WeightId};
use infr_quant::GgmlType;

use crate::fused_kernels::{QuantOut, NORM_Q8_MAX_COLS, QK_ROPE_MAX_DIM};
use crate::kernels::MAX_GEMV_JOBS;

/// How a matmul node reads int8-quantized activations (it runs the integer-dot kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Q8Info {
    /// Blocks of 32 per activation scale (1 or 8).
    pub group: u32,
    /// The weight type (jobs of one dispatch share it).
    pub ty: GgmlType,
    /// Columns of the weight.
    pub k: usize,
    /// The weight is one buffer (no row chunks).
    pub single_chunk: bool,
}

/// A per-head RMS norm folded into the RoPE after it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeadNorm {
    /// The per-element weight (`q_norm.weight`), if any.
    pub weight: Option<WeightId>,
    /// Added to the mean square.
    pub eps: f32,
}

/// The Q or K side of an attention's fused input preparation: `rope(norm?(x))`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RopeSide {
    /// The tensor before the norm and the RoPE (with `slice`, the tensor it is sliced from).
    pub x: TensorId,
    /// Where the side is a per-head column slice of `x` read in place: the period of
    /// columns holding one head and the head's first column in it.
    pub slice: Option<(u32, u32)>,
    /// The per-head norm before the RoPE, if there is one.
    pub norm: Option<HeadNorm>,
    /// The RoPE node: the fused kernel writes its output.
    pub rope: TensorId,
}

/// A weightless per-head RMS norm of V applied by `qk_rope.wgsl` as it appends V.
#[derive(Debug, Clone, Copy)]
pub(crate) struct VNorm {
    /// The tensor before the norm (read in V's place).
    pub x: TensorId,
    /// Added to the mean square.
    pub eps: f32,
}

/// Q and K preparation (and the KV append) of one attention node, done by `qk_rope.wgsl`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttnPrep {
    /// The query side.
    pub q: RopeSide,
    /// The key side (its RoPE output also goes to the KV cache).
    pub k: RopeSide,
    /// V's norm, where the append applies it.
    pub v_norm: Option<VNorm>,
}

/// A whole-row RMS norm that also quantizes its output for the integer-dot kernels (or
/// rounds it into the f16 operand of the split-K matmuls), with the residual add before it
/// folded in (`norm_q8.wgsl`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NormQ8 {
    /// The operands of the absorbed add node (its output is the norm's input); with
    /// `pre_norm`, the first is the input of the absorbed norm that produced that operand.
    pub add: Option<(TensorId, TensorId)>,
    /// The weight and epsilon of a whole-row RMS norm applied to the add's first operand.
    pub pre_norm: PreNorm,
    /// Quantization group (1 or 8 blocks per scale).
    pub group: u32,
    /// Int8 quants or their f16 rounding.
    pub out: QuantOut,
    /// False where the node is the add itself, whose sum is quantized without a norm
    /// ([`Planner::add_q8`]).
    pub final_norm: bool,
    /// Factor of the sum: a scale node between the add and the norm, absorbed (its output is
    /// the sum written); 1 without one.
    pub add_scale: f32,
}

/// The weight and epsilon of a whole-row RMS norm applied to an operand, if any.
pub(crate) type PreNorm = Option<(Option<WeightId>, f32)>;

/// A gated activation that also quantizes its output (`glu_q8.wgsl`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GluQ8 {
    /// Blocks of 32 per scale.
    pub group: u32,
    /// Int8 quants or their f16 rounding.
    pub out: QuantOut,
    /// Where `gate` is a column slice read only by the GLU (Qwen3.5's attention output gate,
    /// a period of each head's query | gate columns): read in place.
    pub gate_slice: Option<ColSlice>,
    /// Where `up` is a column slice read only by the GLU (Gemma 4's per-layer input of one
    /// layer): read in place.
    pub up_slice: Option<ColSlice>,
    /// Where `up` is an RMS norm over groups of columns (a weight of one group) read only by
    /// the GLU: the norm, applied to its input in place (Qwen3.5's gated norm per head).
    pub up_norm: Option<UpNorm>,
}

/// A column slice (`Op::SliceCols`) of whole vec4s read in place by `glu_q8.wgsl`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ColSlice {
    /// The sliced tensor and its columns.
    pub x: TensorId,
    pub in_cols: u32,
    /// Columns per period, the slice's first column in each and its columns per period.
    pub period: u32,
    pub offset: u32,
    pub len: u32,
}

/// A grouped RMS norm of a GLU's up operand, applied by `glu_q8.wgsl` as it reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UpNorm {
    /// The norm's input (read in the operand's place).
    pub x: TensorId,
    pub weight: WeightId,
    pub eps: f32,
    /// Columns per norm group.
    pub group: u32,
}

/// One operand of a [`NormAdd`]: a tensor, or the whole-row RMS norm of one (the norm node
/// absorbed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NormSide {
    /// The tensor read (the norm's input where there is a norm).
    pub x: TensorId,
    /// The absorbed norm's weight and epsilon.
    pub norm: Option<(Option<WeightId>, f32)>,
}

/// Whole-row RMS norms with the add and scale after them, as one dispatch
/// (`norm_add.wgsl`): `scale · (a + b)` where each side may be a norm's output. Gemma's
/// sandwich norms (`post_ffw_norm` then the residual add and the layer's output scale, the
/// two FFN branches' post-norms and their sum, the router's norm and scale) are runs of
/// such tiny row-wise nodes, each a dispatch that costs more to launch than to compute.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NormAdd {
    pub a: NormSide,
    pub b: Option<NormSide>,
    pub scale: f32,
}

/// An L2 norm of each head's row folded into the delta-rule kernel reading it:
/// `x · mult / sqrt(Σ x² + eps)` (llama.cpp's `build_gdn_l2_norm`, which the models build as
/// a weightless per-head RMS norm and a scale).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HeadL2 {
    pub mult: f32,
    pub eps: f32,
}

/// A delta-rule node's q, k and v read in place from the one tensor they are column slices
/// of (the convolution's output), with q's and k's L2 norms applied by the kernel: the
/// three slices, two norms and two scales are not dispatched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DeltaInputs {
    /// The sliced tensor.
    pub x: TensorId,
    /// First column of q, k and v in its rows.
    pub offsets: [u32; 3],
    /// q's norm.
    pub q_l2: HeadL2,
    /// k's norm.
    pub k_l2: HeadL2,
}

/// Widest row `norm_add.wgsl` keeps in registers (NJ vec4s of 256 invocations).
pub(crate) const NORM_ADD_MAX_COLS: usize = 8 * 1024;

/// The fusion decisions for one graph.
pub(crate) struct Fusions {
    /// Nodes computed inside a later node's dispatch (not lowered on their own).
    pub absorbed: Vec<bool>,
    /// Whole-row norms that quantize their output (and the adds folded into them).
    pub norm_q8: HashMap<usize, NormQ8>,
    /// Gated activations that also quantize their output, with the group and the form.
    pub glu_q8: HashMap<usize, GluQ8>,
    /// Attention nodes whose split-merge also quantizes the output, with the group (used
    /// when the attention splits its keys).
    pub attn_q8: HashMap<usize, u32>,
    /// Attention nodes whose Q/K preparation and KV append run as one `qk_rope` dispatch.
    pub attn_prep: HashMap<usize, AttnPrep>,
    /// Consecutive matmuls of one input and weight type run as jobs of one dispatch: the
    /// first node → every member (itself included).
    pub gemv_jobs: HashMap<usize, Vec<usize>>,
    /// Norm / add / scale runs done by one `norm_add` dispatch, by the node that dispatches
    /// them (the run's last node; the others are absorbed).
    pub norm_add: HashMap<usize, NormAdd>,
    /// Split-K matmuls whose partial products the fused kernel reading them adds up (a
    /// `norm_q8` absorbing the residual add they feed, a `glu_q8`): no reduction dispatch.
    pub defer_reduce: HashSet<usize>,
    /// Delta-rule nodes reading q, k and v in place, L2 norms applied.
    pub delta_inputs: HashMap<usize, DeltaInputs>,
}

/// What the device allows to fuse.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FusionOptions {
    /// `norm_q8` / `glu_q8` (needs the integer-dot kernels and subgroup arithmetic).
    pub quantizing: bool,
    /// `qk_rope` (needs 11 storage buffers per stage).
    pub qk_rope: bool,
    /// Most integer-dot matmuls one dispatch may take (each past the first binds 3 more
    /// storage buffers; 0 or 1: none grouped).
    pub gemv_jobs: usize,
    /// Norms and GLUs that write the f16 operand of the split-K matmuls reading them (needs
    /// the cooperative-matrix kernels, which imply subgroup shuffles).
    pub round16: bool,
    /// `norm_add` (needs subgroup arithmetic).
    pub norm_add: bool,
    /// V's per-head norm applied by `qk_rope` as it appends V (not where a q8_0 cache is
    /// written by its own kernel, which reads the normed V).
    pub v_norm: bool,
    /// Delta-rule nodes read q, k and v in place ([`DeltaInputs`]).
    pub delta_inputs: bool,
    /// Delta-rule nodes of fewer rows than this (0: all) run the recurrence, which can read
    /// q, k and v in place; longer ones take the chunked form.
    pub delta_chunk_min: u32,
}

/// How the lowering will run the matmul nodes, as the fusion plan needs to know it.
pub(crate) struct MatmulPaths<Q, R, S, M> {
    /// How node `j` reads int8-quantized activations, if it is a matmul that does (or a
    /// mixture of experts whose expert matmuls do: only the group counts there).
    pub q8: Q,
    /// The quantization group by which node `j` rounds its f16 operand, if it is a split-K
    /// matmul whose rounding is an int8 one.
    pub round16: R,
    /// Whether node `j` is a split-K matmul whose reduction its reader may do (no bias).
    pub split_k: S,
    /// Whether node `j` is a mixture of experts whose expert rows its reader may add up (one
    /// token on the integer-dot path): its `k` weighted routed rows, and a gated shared
    /// expert's after them, are planes, as a split-K matmul's partial products are, and no
    /// `moe_combine` runs.
    pub moe_planes: M,
}

/// Decide the fusions of `graph`, whose matmuls run as `paths` says.
pub(crate) fn plan<Q, R, S, M>(graph: &Graph, opts: FusionOptions, paths: MatmulPaths<Q, R, S, M>) -> Fusions
where
    Q: Fn(usize) -> Option<Q8Info>,
    R: Fn(usize) -> Option<u32>,
    S: Fn(usize) -> bool,
    M: Fn(usize) -> bool,
{
    let mut p = Planner::new(graph, opts, paths);
    // First, so that no norm or scale of a delta rule's inputs goes to another fusion.
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Op::DeltaNet { q, k, v, params, .. } = &node.op {
            let recurrence = opts.delta_chunk_min == 0 || node.rows() < opts.delta_chunk_min as usize;
            if opts.delta_inputs && recurrence {
                p.delta_inputs(i, [*q, *k, *v], params.head_dim);
            }
        }
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        if p.fx.absorbed[i] {
            continue;
        }
        match &node.op {
            Op::RmsNorm { x, .. } => p.norm_q8(i, *x),
            Op::Glu { gate, up, .. } if (opts.quantizing || opts.round16) && node.cols() % 32 == 0 => {
                p.glu_q8(i, *gate, *up)
            }
            Op::Attention { q, k, v, params } if opts.qk_rope || opts.quantizing => p.attention(i, *q, *k, *v, params),
            Op::Add { a, b } if opts.norm_add && !p.fx.absorbed[i] => p.norm_add(i, *a, *b),
            Op::Scale { x, s } if opts.norm_add && !p.fx.absorbed[i] && !p.fx.norm_add.contains_key(&i) => {
                p.norm_scale(i, *x, *s)
            }
            Op::Linear { x, .. } if opts.gemv_jobs > 1 && !p.fx.absorbed[i] => p.gemv_jobs(i, *x, opts.gemv_jobs),
            _ => {}
        }
    }
    p.fx
}

/// One planning pass over a graph: its readers and the decisions so far. Nodes are visited in
/// order, each method deciding the fusion that node ends (earlier nodes it takes in are
/// absorbed).
struct Planner<'g, Q, R, S, M> {
    graph: &'g Graph,
    opts: FusionOptions,
    paths: MatmulPaths<Q, R, S, M>,
    /// For every node, the nodes reading its output.
    consumers: Vec<Vec<usize>>,
    fx: Fusions,
}

impl<'g, Q, R, S, M> Planner<'g, Q, R, S, M>
where
    Q: Fn(usize) -> Option<Q8Info>,
    R: Fn(usize) -> Option<u32>,
    S: Fn(usize) -> bool,
    M: Fn(usize) -> bool,
{
    fn new(graph: &'g Graph, opts: FusionOptions, paths: MatmulPaths<Q, R, S, M>) -> Self {
        let n = graph.nodes.len();
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, node) in graph.nodes.iter().enumerate() {
            for inp in node.op.inputs() {
                if !consumers[inp.0 as usize].contains(&i) {
                    consumers[inp.0 as usize].push(i);
                }
            }
        }
        let fx = Fusions {
            absorbed: vec![false; n],
            norm_q8: HashMap::new(),
            glu_q8: HashMap::new(),
            attn_q8: HashMap::new(),
            attn_prep: HashMap::new(),
            gemv_jobs: HashMap::new(),
            norm_add: HashMap::new(),
            defer_reduce: HashSet::new(),
            delta_inputs: HashMap::new(),
        };
        Self { graph, opts, paths, consumers, fx }
    }

    /// Whether node `j` is a split-K matmul (or a mixture of experts whose routed rows are
    /// planes) read only by node `reader`, whose reduction that reader may do.
    fn deferrable(&self, j: usize, reader: usize) -> bool {
        let planes = match self.graph.nodes[j].op {
            Op::Linear { .. } => (self.paths.split_k)(j),
            Op::Moe { .. } => (self.paths.moe_planes)(j),
            _ => false,
        };
        planes && self.consumers[j] == [reader]
    }

    /// Leave the reduction of split-K matmul `t` to `reader` where it may.
    fn defer(&mut self, t: TensorId, reader: usize) {
        if self.deferrable(t.0 as usize, reader) {
            self.fx.defer_reduce.insert(t.0 as usize);
        }
    }

    /// The quantization group of the first integer-dot matmul reading node `i` as its input.
    fn quant_group(&self, i: usize) -> Option<u32> {
        self.consumers[i].iter().find_map(|&j| match self.graph.nodes[j].op {
            Op::Linear { x, .. } | Op::Moe { x, .. } if x.0 as usize == i => (self.paths.q8)(j).map(|q| q.group),
            _ => None,
        })
    }

    /// What a quantizing kernel producing node `i` writes: int8 quants for an integer-dot
    /// reader, else the f16 rounding of a split-K matmul reading it.
    fn quant_out(&self, i: usize) -> Option<(u32, QuantOut)> {
        self.quant_group(i).map(|g| (g, QuantOut::Int8)).or_else(|| {
            let g = self.consumers[i].iter().find_map(|&j| match self.graph.nodes[j].op {
                Op::Linear { x, .. } if x.0 as usize == i && self.opts.round16 => (self.paths.round16)(j),
                _ => None,
            })?;
            Some((g, QuantOut::F16))
        })
    }

    /// What node `i` writes beside its output where it is a whole-row norm that quantizes it.
    fn norm_q8_out(&self, i: usize) -> Option<(u32, QuantOut)> {
        let node = &self.graph.nodes[i];
        let Op::RmsNorm { group, .. } = node.op else { return None };
        let cols = node.cols();
        let fits = group as usize == cols && cols % 32 == 0 && cols <= NORM_Q8_MAX_COLS;
        if !(self.opts.quantizing || self.opts.round16) || !fits {
            return None;
        }
        self.quant_out(i)
    }

    /// Operand `t` of node `reader` as a [`NormSide`]: where `t` is a whole-row RMS norm that
    /// only `reader` reads and no other fusion took, its input and parameters, with the norm's
    /// node (to absorb); else `t` itself.
    fn norm_side(&self, t: TensorId, reader: usize) -> (NormSide, Option<usize>) {
        let (ti, fx) = (t.0 as usize, &self.fx);
        let node = self.graph.node(t);
        if let Op::RmsNorm { x, weight, eps, group } = &node.op {
            let free = !fx.absorbed[ti] && !fx.norm_q8.contains_key(&ti) && !fx.norm_add.contains_key(&ti);
            let whole_row = *group as usize == node.cols() && same_shape(self.graph, node, &[*x]);
            if whole_row && self.consumers[ti] == [reader] && free {
                return (NormSide { x: *x, norm: Some((*weight, *eps)) }, Some(ti));
            }
        }
        (NormSide { x: t, norm: None }, None)
    }

    /// Norm node `i` (input `x`) as a `norm_q8`, with the residual add just before it and
    /// the norm of that add's operand folded in where they can be.
    fn norm_q8(&mut self, i: usize, x: TensorId) {
        let Some((group, out)) = self.norm_q8_out(i) else { return };
        let (graph, node, xi) = (self.graph, &self.graph.nodes[i], x.0 as usize);
        // The add just before the norm, or the add before a scale just before it.
        let (add, add_scale) = match self.scaled_add(xi) {
            Some((ai, a, b, s)) if xi + 1 == i && same_shape(graph, node, &[a, b]) => (Some((ai, a, b)), s),
            _ => match graph.nodes[xi].op {
                Op::Add { a, b } if xi + 1 == i && !self.fx.absorbed[xi] && same_shape(graph, node, &[a, b]) => {
                    (Some((xi, a, b)), 1.0)
                }
                _ => (None, 1.0),
            },
        };
        let (add, pre_norm) = match add {
            Some((ai, a, b)) => {
                let (ab, pre_norm) = self.fold_add(ai, a, b);
                self.fx.absorbed[ai] = true;
                self.fx.absorbed[xi] = true;
                (Some(ab), pre_norm)
            }
            None => (None, None),
        };
        self.fx.norm_q8.insert(i, NormQ8 { add, pre_norm, group, out, final_norm: true, add_scale });
    }

    /// Where node `si` scales an add node just before it that only it reads (a layer's output
    /// scale after its residual add): the add's index, operands and the factor.
    fn scaled_add(&self, si: usize) -> Option<(usize, TensorId, TensorId, f32)> {
        let Op::Scale { x, s } = self.graph.nodes[si].op else { return None };
        let ai = x.0 as usize;
        let Op::Add { a, b } = self.graph.nodes[ai].op else { return None };
        let free = |j: usize| !self.fx.absorbed[j] && !self.fx.norm_add.contains_key(&j);
        (ai + 1 == si && self.consumers[ai] == [si] && free(ai) && free(si)).then_some((ai, a, b, s))
    }

    /// Whether add node `i`, scaled by the next node, feeds a norm after that which a
    /// `norm_q8` will take with both in.
    fn scaled_into_norm_q8(&self, i: usize) -> bool {
        let g = self.graph;
        let norm_of_scale =
            g.nodes.get(i + 2).is_some_and(|m| matches!(m.op, Op::RmsNorm { x, .. } if x.0 as usize == i + 1));
        norm_of_scale && self.scaled_add(i + 1).is_some_and(|(ai, ..)| ai == i) && self.norm_q8_out(i + 2).is_some()
    }

    /// The operands of add node `xi` as a `norm_q8` binds them, (A, B), and the norm it
    /// applies to A: the operand bound as B may be a split-K matmul's planes (a + b = b + a),
    /// and an operand that is a norm read by the add alone (the sandwich norm after
    /// attention) is normed there too, bound as A (B then holds no planes: a norm is not a
    /// matmul, and were A one, the two would have swapped).
    fn fold_add(&mut self, xi: usize, a: TensorId, b: TensorId) -> ((TensorId, TensorId), PreNorm) {
        let (a, b) =
            if !self.deferrable(b.0 as usize, xi) && self.deferrable(a.0 as usize, xi) { (b, a) } else { (a, b) };
        self.defer(b, xi);
        let (sa, na) = self.norm_side(a, xi);
        let (sb, nb) = self.norm_side(b, xi);
        let picked = match (na, nb) {
            (Some(j), _) => Some((sa, b, j)),
            (None, Some(j)) => Some((sb, a, j)),
            _ => None,
        };
        match picked {
            Some((side, other, j)) => {
                self.fx.absorbed[j] = true;
                ((side.x, other), side.norm)
            }
            None => ((a, b), None),
        }
    }

    /// Residual add node `i` whose sum an integer-dot matmul reads (Gemma 4 E's per-layer
    /// input gate after the FFN) as a `norm_q8` without its final norm: the sum and its int8
    /// copy in one dispatch instead of an add (or `norm_add`) and a `quantize_act`.
    fn add_q8(&mut self, i: usize, a: TensorId, b: TensorId) -> bool {
        let (graph, node) = (self.graph, &self.graph.nodes[i]);
        let cols = node.cols();
        let fits = cols % 32 == 0 && cols <= NORM_Q8_MAX_COLS && same_shape(graph, node, &[a, b]);
        if !self.opts.quantizing || !fits {
            return false;
        }
        let Some((group, out @ QuantOut::Int8)) = self.quant_out(i) else { return false };
        let (ab, pre_norm) = self.fold_add(i, a, b);
        self.fx.norm_q8.insert(i, NormQ8 { add: Some(ab), pre_norm, group, out, final_norm: false, add_scale: 1.0 });
        true
    }

    /// Gated activation node `i` as a `glu_q8`, adding up its inputs' split-K planes.
    fn glu_q8(&mut self, i: usize, gate: TensorId, up: TensorId) {
        let Some((group, out)) = self.quant_out(i) else { return };
        // Operands sliced from periods of whole vec4s (one or more periods a row) are read in
        // place of the slices.
        let ui = up.0 as usize;
        let (gate_slice, up_slice) = (self.col_slice(gate, i), self.col_slice(up, i));
        // A grouped norm of up that only the GLU reads, groups of whole vec4s that tile the
        // kernel's 64-vec4 workgroups.
        let cols = self.graph.nodes[i].cols() as u32;
        let up_norm = match self.graph.nodes[ui].op {
            Op::RmsNorm { x, weight: Some(weight), eps, group }
                if up_slice.is_none()
                    && group % 4 == 0
                    && group > 0
                    && 64 % (group / 4) == 0
                    && cols % group == 0
                    && self.consumers[ui] == [i]
                    && !self.fx.absorbed[ui]
                    && !self.fx.norm_q8.contains_key(&ui)
                    && !self.fx.norm_add.contains_key(&ui) =>
            {
                Some(UpNorm { x, weight, eps, group })
            }
            _ => None,
        };
        if up_slice.is_some() || up_norm.is_some() {
            self.fx.absorbed[ui] = true;
        }
        if gate_slice.is_some() {
            self.fx.absorbed[gate.0 as usize] = true;
        }
        self.fx.glu_q8.insert(i, GluQ8 { group, out, gate_slice, up_slice, up_norm });
        self.defer(gate, i);
        self.defer(up, i);
    }

    /// Operand `t` of node `reader` as a [`ColSlice`], where it is a slice of whole vec4s that
    /// only `reader` reads and no other fusion took.
    fn col_slice(&self, t: TensorId, reader: usize) -> Option<ColSlice> {
        let (x, period, offset, len) = self.sole_slice(t, reader)?;
        let in_cols = self.graph.node(x).cols() as u32;
        let fits = (period | offset | len) % 4 == 0 && period > 0 && in_cols % period == 0;
        fits.then_some(ColSlice { x, in_cols, period, offset, len })
    }

    /// Where `t` is a column slice that only node `reader` reads and no fusion took: the
    /// sliced tensor, period, first column and columns per period (`offset + len <= period`).
    fn sole_slice(&self, t: TensorId, reader: usize) -> Option<(TensorId, u32, u32, u32)> {
        let ti = t.0 as usize;
        let Op::SliceCols { x, period, offset, len } = self.graph.nodes[ti].op else { return None };
        let sole = offset + len <= period && self.consumers[ti] == [reader] && !self.fx.absorbed[ti];
        sole.then_some((x, period, offset, len))
    }

    /// Attention node `i`: its split-merge quantizing the output, and its Q/K preparation
    /// and KV append as one `qk_rope` dispatch.
    fn attention(&mut self, i: usize, q: TensorId, k: TensorId, v: TensorId, params: &AttnParams) {
        let (graph, opts, node) = (self.graph, self.opts, &self.graph.nodes[i]);
        if opts.quantizing && node.cols() % 32 == 0 && params.head_dim_v % 4 == 0 {
            if let Some(g) = self.quant_group(i) {
                self.fx.attn_q8.insert(i, g);
            }
        }
        if !opts.qk_rope {
            return;
        }
        let (Some(qs), Some(ks)) = (rope_side(graph, &self.consumers, q, i), rope_side(graph, &self.consumers, k, i))
        else {
            return;
        };
        let (Op::Rope { params: qp, .. }, Op::Rope { params: kp, .. }) =
            (&graph.node(qs.rope).op, &graph.node(ks.rope).op)
        else {
            return;
        };
        let ok = qp == kp
            && qp.head_dim == params.head_dim_k
            && qp.head_dim % 2 == 0
            && qp.n_rot % 2 == 0
            && qp.n_rot > 0
            && qp.n_rot <= qp.head_dim
            && params.head_dim_k <= QK_ROPE_MAX_DIM
            && params.head_dim_v % 2 == 0;
        if !ok {
            return;
        }
        // A query that is a per-head column slice (Qwen3.5's query | gate projection) read only
        // by its norm or RoPE is read in place.
        let qs = self.sliced_heads(qs, params.n_head, params.head_dim_k);
        // The q / k / v matmuls whose only reader this dispatch absorbs (the side's norm, else
        // its RoPE; v, which it appends to the cache) leave their reductions to it.
        for side in [qs, ks] {
            let first = match (side.norm, &graph.node(side.rope).op) {
                (Some(_), Op::Rope { x, .. }) => *x,
                _ => side.rope,
            };
            self.defer(side.x, first.0 as usize);
        }
        // A weightless per-head norm of V (Gemma 4) read by this attention alone is applied as
        // V is appended: its input stands in for V.
        let vi = v.0 as usize;
        let v_norm = match graph.node(v).op {
            Op::RmsNorm { x: raw, weight: None, eps, group }
                if opts.v_norm
                    && params.write_kv
                    && group == params.head_dim_v
                    && self.consumers[vi] == [i]
                    && !self.fx.absorbed[vi] =>
            {
                Some(VNorm { x: raw, eps })
            }
            _ => None,
        };
        let (v_in, v_reader) = match v_norm {
            Some(vn) => (vn.x, vi),
            None => (v, i),
        };
        if params.write_kv {
            self.defer(v_in, v_reader);
        }
        if v_norm.is_some() {
            self.fx.absorbed[vi] = true;
        }
        for side in [qs, ks] {
            self.fx.absorbed[side.rope.0 as usize] = true;
            if side.norm.is_some() {
                if let Op::Rope { x, .. } = graph.node(side.rope).op {
                    self.fx.absorbed[x.0 as usize] = true;
                }
            }
        }
        self.fx.attn_prep.insert(i, AttnPrep { q: qs, k: ks, v_norm });
    }

    /// `side` reading its input in place where that input is a column slice of one head of
    /// `head_dim` columns per period of a tensor of `n_head` periods, read only by the side's
    /// first node (the slice is absorbed).
    fn sliced_heads(&mut self, side: RopeSide, n_head: u32, head_dim: u32) -> RopeSide {
        let g = self.graph;
        let first = match (side.norm, &g.node(side.rope).op) {
            (Some(_), Op::Rope { x, .. }) => x.0 as usize,
            _ => side.rope.0 as usize,
        };
        let Some((x, period, offset, len)) = self.sole_slice(side.x, first) else { return side };
        if len != head_dim || g.node(x).cols() != (n_head * period) as usize {
            return side;
        }
        self.fx.absorbed[side.x.0 as usize] = true;
        RopeSide { x, slice: Some((period, offset)), ..side }
    }

    /// Add node `i` as a `norm_add` taking in the norms of its operands and a scale of its
    /// sum after it.
    fn norm_add(&mut self, i: usize, a: TensorId, b: TensorId) {
        let (graph, node) = (self.graph, &self.graph.nodes[i]);
        // An add that the next node's norm_q8 takes in stays with it.
        let next_norm =
            graph.nodes.get(i + 1).is_some_and(|m| matches!(m.op, Op::RmsNorm { x, .. } if x.0 as usize == i));
        if (next_norm && self.norm_q8_out(i + 1).is_some())
            || self.scaled_into_norm_q8(i)
            || !row_wise(node.cols())
            || !same_shape(graph, node, &[a, b])
            || self.add_q8(i, a, b)
        {
            return;
        }
        let (sa, na) = self.norm_side(a, i);
        let (sb, nb) = self.norm_side(b, i);
        // A following scale of the sum alone joins the run.
        let scaled = graph.nodes.get(i + 1).and_then(|m| match m.op {
            Op::Scale { x, s } if x.0 as usize == i && self.consumers[i] == [i + 1] => Some(s),
            _ => None,
        });
        if na.is_none() && nb.is_none() && scaled.is_none() {
            return;
        }
        let at = if scaled.is_some() { i + 1 } else { i };
        if scaled.is_some() {
            self.fx.absorbed[i] = true;
        }
        for j in [na, nb].into_iter().flatten() {
            self.fx.absorbed[j] = true;
        }
        self.fx.norm_add.insert(at, NormAdd { a: sa, b: Some(sb), scale: scaled.unwrap_or(1.0) });
    }

    /// Scale node `i` of a norm's output read by it alone, as a `norm_add` without B.
    fn norm_scale(&mut self, i: usize, x: TensorId, s: f32) {
        if !row_wise(self.graph.nodes[i].cols()) {
            return;
        }
        let (side, norm) = self.norm_side(x, i);
        let Some(j) = norm else { return };
        self.fx.absorbed[j] = true;
        self.fx.norm_add.insert(i, NormAdd { a: side, b: None, scale: s });
    }

    /// Delta-rule node `i` reading `[q, k, v]` in place where they are whole-row column slices
    /// of one tensor, q and k through a weightless RMS norm over each head (`head_dim`) and an
    /// optional scale, each read only by the next step.
    fn delta_inputs(&mut self, i: usize, [q, k, v]: [TensorId; 3], head_dim: u32) {
        let g = self.graph;
        let only = |t: TensorId, reader: usize| self.consumers[t.0 as usize] == [reader];
        // A whole-row slice read only by `reader`: its input and first column.
        let slice = |t: TensorId, reader: usize| {
            let (x, period, offset, _) = self.sole_slice(t, reader)?;
            (period as usize == g.node(x).cols()).then_some((x, offset))
        };
        // scale?(rms_norm(slice)) read only by node `i`: the slice's input and first column,
        // the norm and the absorbed nodes.
        let normed = |t: TensorId| -> Option<(TensorId, u32, HeadL2, Vec<usize>)> {
            let (mult, norm_t, mut nodes) = match g.node(t).op {
                Op::Scale { x, s } if only(t, i) => (s, x, vec![t.0 as usize]),
                _ => (1.0, t, Vec::new()),
            };
            let reader = nodes.first().copied().unwrap_or(i);
            let Op::RmsNorm { x, weight: None, eps, group } = g.node(norm_t).op else { return None };
            if group != head_dim || !only(norm_t, reader) {
                return None;
            }
            let (src, off) = slice(x, norm_t.0 as usize)?;
            nodes.extend([norm_t.0 as usize, x.0 as usize]);
            let d = head_dim as f32;
            Some((src, off, HeadL2 { mult: mult * d.sqrt(), eps: eps * d }, nodes))
        };
        let (Some((xq, q_off, q_l2, nq)), Some((xk, k_off, k_l2, nk)), Some((xv, v_off))) =
            (normed(q), normed(k), slice(v, i))
        else {
            return;
        };
        if xq != xk || xk != xv || nq.iter().chain(&nk).chain([&(v.0 as usize)]).any(|&j| self.fx.absorbed[j]) {
            return;
        }
        for j in nq.into_iter().chain(nk).chain([v.0 as usize]) {
            self.fx.absorbed[j] = true;
        }
        self.fx.delta_inputs.insert(i, DeltaInputs { x: xq, offsets: [q_off, k_off, v_off], q_l2, k_l2 });
    }

    /// Matmul node `i` and the next ones reading `x` with a weight of its type, as up to
    /// `most` jobs of one integer-dot dispatch.
    fn gemv_jobs(&mut self, i: usize, x: TensorId, most: usize) {
        let (graph, n) = (self.graph, self.graph.nodes.len());
        let Some(first) = (self.paths.q8)(i).filter(|q| q.single_chunk) else { return };
        // Later members are written at the first one's dispatch: consecutive nodes reading
        // only `x` free no other tensor in between.
        let mut members = vec![i];
        while members.len() < most.min(MAX_GEMV_JOBS) {
            let j = i + members.len();
            let same = j < n
                && matches!(graph.nodes[j].op, Op::Linear { x: xj, .. } if xj == x)
                && (self.paths.q8)(j) == Some(first);
            if !same {
                break;
            }
            members.push(j);
        }
        if members.len() > 1 {
            for &j in &members[1..] {
                self.fx.absorbed[j] = true;
            }
            self.fx.gemv_jobs.insert(i, members);
        }
    }
}

/// Whether rows of `cols` fit `norm_add.wgsl`.
fn row_wise(cols: usize) -> bool {
    cols > 0 && cols % 4 == 0 && cols <= NORM_ADD_MAX_COLS
}

/// Whether every tensor of `ts` has the shape of `node`.
fn same_shape(graph: &Graph, node: &infr_core::Node, ts: &[TensorId]) -> bool {
    ts.iter().all(|&t| {
        let m = graph.node(t);
        (m.rows(), m.cols()) == (node.rows(), node.cols())
    })
}

/// `t` as `rope(norm?(x))` read only by attention node `attn`, with a per-head norm read
/// only by that RoPE.
fn rope_side(graph: &Graph, consumers: &[Vec<usize>], t: TensorId, attn: usize) -> Option<RopeSide> {
    let Op::Rope { x, params } = &graph.node(t).op else { return None };
    if consumers[t.0 as usize] != [attn] {
        return None;
    }
    if let Op::RmsNorm { x: raw, weight, eps, group } = &graph.node(*x).op {
        if *group == params.head_dim && consumers[x.0 as usize] == [t.0 as usize] {
            return Some(RopeSide {
                x: *raw,
                slice: None,
                norm: Some(HeadNorm { weight: *weight, eps: *eps }),
                rope: t,
            });
        }
    }
    Some(RopeSide { x: *x, slice: None, norm: None, rope: t })
}
