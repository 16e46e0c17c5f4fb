//! The graph IR: semantic ops over typed tensors (plus per-sequence state that recurrent ops
//! keep in their state slots); the ops' parameters are in `params.rs`.
//!
//! Every node produces one tensor of a [`DType`] and a [`Shape`] of up to four dimensions.
//! The ops of today's models produce f32 `[rows, cols]` matrices (row-major; a row is one
//! token); heads are a view on the columns (`cols = n_heads * head_dim`). Nodes are in
//! execution order and a node's id is its index, so a graph is also its own schedule.

use crate::params::*;

/// Index of a weight in the model's weight table (see `WeightSource` and `Backend::load_weight`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WeightId(pub u32);

/// Index of a node (and of the tensor it produces) in a [`Graph`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

/// One semantic op. Inputs are earlier nodes; shapes are checked by [`GraphBuilder`].
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Rows of an embedding table for the step's tokens → `[n_tokens, dim]`.
    Embed { table: WeightId },
    /// Expected embedding under a distribution over the vocabulary: row `r` is
    /// `sum_v embed_mix[r][v] * table[v]` (`StepInputs::embed_mix`; zeros when it is empty).
    /// DiffusionGemma's self-conditioning feeds the previous step's probabilities back this way.
    MixEmbed { table: WeightId },
    /// Activations handed in by the host (`StepInputs::hidden`, row-major, the node's shape):
    /// how a pipeline stage after the first receives the tensor its previous stage made on
    /// another device. At most one per graph.
    Input,
    /// `x @ W^T (+ bias)`: `[n, k] → [n, out]` for a weight stored as `out` rows of `k`.
    Linear { x: TensorId, weight: WeightId, bias: Option<WeightId> },
    /// RMS norm over each `group` columns (group = cols for a whole row, head_dim per head),
    /// times an optional weight of `group` elements (`ggml_rms_norm` + `ggml_mul`).
    RmsNorm { x: TensorId, weight: Option<WeightId>, eps: f32, group: u32 },
    /// Rotary position embedding with the step's positions.
    Rope { x: TensorId, params: RopeParams },
    /// Causal multi-head attention of `q` against the sequence's cached keys (the step's own
    /// `k`, `v` are appended first when `write_kv`).
    Attention { q: TensorId, k: TensorId, v: TensorId, params: AttnParams },
    /// Elementwise `a + b`.
    Add { a: TensorId, b: TensorId },
    /// Elementwise `a * b`.
    Mul { a: TensorId, b: TensorId },
    /// `x * s`.
    Scale { x: TensorId, s: f32 },
    /// Each row times a factor of its token's position (attention temperature tuning).
    TempScale { x: TensorId, params: TempScaleParams },
    /// Gated activation `act(gate) * up`.
    Glu { gate: TensorId, up: TensorId, act: Activation },
    /// `cap * tanh(x / cap)`.
    Softcap { x: TensorId, cap: f32 },
    /// Keep only the step's output rows (`StepInputs::output_rows`).
    OutputRows { x: TensorId },
    /// Mixture-of-experts FFN of `x` routed by `logits` (`[rows, n_expert]`, computed by the
    /// model from whatever its router reads): top-k, gating, the chosen experts' gated FFNs,
    /// their weighted sum, plus the shared expert.
    Moe { x: TensorId, logits: TensorId, params: MoeParams },
    /// Columns `[offset, offset + len)` of each `period`-wide group of columns: splits fused
    /// projections (`period = cols`) and per-head interleaved ones (Qwen3.5's q | gate).
    SliceCols { x: TensorId, period: u32, offset: u32, len: u32 },
    /// Causal depthwise convolution with a per-sequence window (see [`Conv1dParams`]).
    Conv1d { x: TensorId, params: Conv1dParams },
    /// Gated delta rule over each sequence's tokens (see [`DeltaNetParams`]); `q`, `k` are
    /// `[rows, n_k_head * head_dim]`, `v` is `[rows, n_v_head * head_dim]`, `alpha` and `beta`
    /// `[rows, n_v_head]`. Output `[rows, n_v_head * head_dim]`.
    DeltaNet { q: TensorId, k: TensorId, v: TensorId, alpha: TensorId, beta: TensorId, params: DeltaNetParams },
}

impl Op {
    /// The node inputs of this op.
    pub fn inputs(&self) -> Vec<TensorId> {
        let mut op = self.clone();
        op.input_slots().into_iter().map(|t| *t).collect()
    }

    /// Replace every node input `t` by `f(t)` (renumbering when a graph is cut into pieces).
    pub fn map_inputs(&mut self, mut f: impl FnMut(TensorId) -> TensorId) {
        for t in self.input_slots() {
            *t = f(*t);
        }
    }

    /// The op's node inputs, in order, in place.
    fn input_slots(&mut self) -> Vec<&mut TensorId> {
        match self {
            Op::Embed { .. } | Op::MixEmbed { .. } | Op::Input => vec![],
            Op::Linear { x, .. }
            | Op::RmsNorm { x, .. }
            | Op::Rope { x, .. }
            | Op::Scale { x, .. }
            | Op::TempScale { x, .. }
            | Op::Softcap { x, .. }
            | Op::OutputRows { x }
            | Op::SliceCols { x, .. }
            | Op::Conv1d { x, .. } => vec![x],
            Op::DeltaNet { q, k, v, alpha, beta, .. } => vec![q, k, v, alpha, beta],
            Op::Attention { q, k, v, .. } => vec![q, k, v],
            Op::Add { a, b } | Op::Mul { a, b } => vec![a, b],
            Op::Glu { gate, up, .. } => vec![gate, up],
            Op::Moe { x, logits, .. } => vec![x, logits],
        }
    }

    /// A short name for profiles and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Embed { .. } => "embed",
            Op::MixEmbed { .. } => "mix_embed",
            Op::Input => "input",
            Op::Linear { .. } => "linear",
            Op::RmsNorm { .. } => "rms_norm",
            Op::Rope { .. } => "rope",
            Op::Attention { .. } => "attention",
            Op::Add { .. } => "add",
            Op::Mul { .. } => "mul",
            Op::Scale { .. } => "scale",
            Op::TempScale { .. } => "temp_scale",
            Op::Glu { .. } => "glu",
            Op::Softcap { .. } => "softcap",
            Op::OutputRows { .. } => "output_rows",
            Op::Moe { .. } => "moe",
            Op::SliceCols { .. } => "slice_cols",
            Op::Conv1d { .. } => "conv1d",
            Op::DeltaNet { .. } => "delta_net",
        }
    }
}

/// Element type of a graph tensor. Every op of today's models produces `F32` activations;
/// the type travels with each node so that an op producing indices (expert ids) or half
/// floats can be added without changing [`Node`], and a backend that cannot hold a type
/// refuses the model up front ([`crate::Backend::supports`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    I32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 => 2,
        }
    }

    /// The name errors and profiles print.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I32 => "i32",
        }
    }
}

/// The extent of a graph tensor: one to [`Shape::MAX_RANK`] dimensions, outermost first,
/// the last one contiguous (ggml's `ne` read backwards). Ops that work on rows see the
/// tensor as a matrix of [`Shape::rows`] x [`Shape::cols`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: [usize; Shape::MAX_RANK],
    rank: u8,
}

impl Shape {
    /// Most dimensions a tensor has (ggml's `GGML_MAX_DIMS`).
    pub const MAX_RANK: usize = 4;

    /// A shape of `dims`, outermost first. Panics on no dimensions or more than
    /// [`Shape::MAX_RANK`]: shapes come from model code, not from user input.
    pub fn new(dims: &[usize]) -> Self {
        assert!(!dims.is_empty() && dims.len() <= Self::MAX_RANK, "a tensor has 1 to 4 dimensions, not {}", dims.len());
        let mut d = [1; Self::MAX_RANK];
        d[..dims.len()].copy_from_slice(dims);
        Self { dims: d, rank: dims.len() as u8 }
    }

    /// A `[rows, cols]` matrix.
    pub fn matrix(rows: usize, cols: usize) -> Self {
        Self::new(&[rows, cols])
    }

    /// The dimensions, outermost first.
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }

    /// The innermost (contiguous) dimension.
    pub fn cols(&self) -> usize {
        self.dims()[self.rank as usize - 1]
    }

    /// The product of all but the innermost dimension: the row count of the matrix view.
    pub fn rows(&self) -> usize {
        self.dims()[..self.rank as usize - 1].iter().product()
    }

    /// Elements in the tensor.
    pub fn elements(&self) -> usize {
        self.dims().iter().product()
    }
}

/// A node: an op and the type and shape of the tensor it produces.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub op: Op,
    pub shape: Shape,
    pub dtype: DType,
    /// Optional label for profiles (`blk.3.attn_q`).
    pub label: Option<String>,
}

impl Node {
    /// Rows of the output's matrix view (tokens, for the ops of today's models).
    pub fn rows(&self) -> usize {
        self.shape.rows()
    }

    /// Columns of the output's matrix view (its innermost dimension).
    pub fn cols(&self) -> usize {
        self.shape.cols()
    }

    /// Bytes of the output tensor.
    pub fn bytes(&self) -> u64 {
        (self.shape.elements() * self.dtype.size()) as u64
    }
}

/// A step graph for a fixed step shape (token count and output-row count). The last node is
/// the output.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    /// Tokens in the step.
    pub n_tokens: usize,
    /// Rows kept by `OutputRows`.
    pub n_outputs: usize,
}

impl Graph {
    /// The output node.
    pub fn output(&self) -> TensorId {
        TensorId(self.nodes.len() as u32 - 1)
    }

    /// The node behind a tensor id.
    pub fn node(&self, t: TensorId) -> &Node {
        &self.nodes[t.0 as usize]
    }

    /// For each node, the index of the last node that reads it (itself if none): lets
    /// backends recycle activation buffers.
    pub fn last_uses(&self) -> Vec<usize> {
        let mut last: Vec<usize> = (0..self.nodes.len()).collect();
        for (i, n) in self.nodes.iter().enumerate() {
            for inp in n.op.inputs() {
                last[inp.0 as usize] = i;
            }
        }
        if let Some(l) = last.last_mut() {
            *l = usize::MAX;
        }
        last
    }

    /// Elements of the graph's [`Op::Input`] node (0 without one): what `StepInputs::hidden`
    /// must hold.
    pub fn input_elements(&self) -> usize {
        self.nodes.iter().find(|n| n.op == Op::Input).map_or(0, |n| n.shape.elements())
    }

    /// Peak bytes of node outputs alive at once when each is freed after its last
    /// reader: a lower bound on a plan's activation memory, which the engine counts in its
    /// up-front memory check.
    pub fn activation_bytes(&self) -> u64 {
        let size = |n: &Node| n.bytes();
        let mut freed_after = vec![0u64; self.nodes.len()];
        for (n, &l) in self.nodes.iter().zip(&self.last_uses()) {
            if let Some(f) = freed_after.get_mut(l) {
                *f += size(n);
            }
        }
        let (mut live, mut peak) = (0u64, 0u64);
        for (n, freed) in self.nodes.iter().zip(freed_after) {
            live += size(n);
            peak = peak.max(live);
            live -= freed;
        }
        peak
    }
}

/// Builds a [`Graph`], checking shapes as ops are added. Models call its methods; the shape of
/// each weight is supplied by a lookup closure so the builder stays independent of storage.
pub struct GraphBuilder<'w> {
    nodes: Vec<Node>,
    n_tokens: usize,
    n_outputs: usize,
    weight_shape: &'w dyn Fn(WeightId) -> Vec<usize>,
    label: Option<String>,
}

/// Shape mismatches are programming errors in a model file (the loader already checked the
/// weights), so the builder panics with a message naming the op.
impl<'w> GraphBuilder<'w> {
    /// A builder for a step of `n_tokens` tokens keeping `n_outputs` output rows;
    /// `weight_shape(id)` returns ggml dims (`[cols, rows]` for a matrix).
    pub fn new(n_tokens: usize, n_outputs: usize, weight_shape: &'w dyn Fn(WeightId) -> Vec<usize>) -> Self {
        assert!(n_tokens > 0 && n_outputs > 0 && n_outputs <= n_tokens, "bad step shape");
        Self { nodes: Vec::new(), n_tokens, n_outputs, weight_shape, label: None }
    }

    /// Tokens in the step.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Label the following nodes (for profiles) until changed.
    pub fn set_label(&mut self, label: impl Into<String>) {
        self.label = Some(label.into());
    }

    /// Shape `(rows, cols)` of a tensor's matrix view. The ops of today's models read f32
    /// activations, so this also checks that `t` is one (a model handing an index tensor to
    /// a matmul is a bug in the model file).
    pub fn shape(&self, t: TensorId) -> (usize, usize) {
        let n = &self.nodes[t.0 as usize];
        assert_eq!(n.dtype, DType::F32, "{} output read as f32 activations", n.op.name());
        (n.rows(), n.cols())
    }

    /// The node behind a tensor id (its type, dims and op).
    pub fn node(&self, t: TensorId) -> &Node {
        &self.nodes[t.0 as usize]
    }

    fn push(&mut self, op: Op, rows: usize, cols: usize) -> TensorId {
        self.push_typed(op, Shape::matrix(rows, cols), DType::F32)
    }

    /// Add a node of any type and shape: the entry point of an op whose output is not an
    /// f32 matrix.
    pub fn push_typed(&mut self, op: Op, shape: Shape, dtype: DType) -> TensorId {
        self.nodes.push(Node { op, shape, dtype, label: self.label.clone() });
        TensorId(self.nodes.len() as u32 - 1)
    }

    fn same_shape(&self, op: &str, a: TensorId, b: TensorId) -> (usize, usize) {
        let (sa, sb) = (self.shape(a), self.shape(b));
        assert_eq!(sa, sb, "{op}: shapes {sa:?} and {sb:?} differ");
        sa
    }

    /// Embedding lookup.
    pub fn embed(&mut self, table: WeightId) -> TensorId {
        let dims = (self.weight_shape)(table);
        self.push(Op::Embed { table }, self.n_tokens, dims[0])
    }

    /// Activations of `rows x cols` handed in by the host (see [`Op::Input`]).
    pub fn input(&mut self, rows: usize, cols: usize) -> TensorId {
        assert!(!self.nodes.iter().any(|n| n.op == Op::Input), "input: a graph has at most one");
        self.push(Op::Input, rows, cols)
    }

    /// Probability-weighted embedding rows (see [`Op::MixEmbed`]).
    pub fn mix_embed(&mut self, table: WeightId) -> TensorId {
        let dims = (self.weight_shape)(table);
        self.push(Op::MixEmbed { table }, self.n_tokens, dims[0])
    }

    /// Linear layer.
    pub fn linear(&mut self, x: TensorId, weight: WeightId, bias: Option<WeightId>) -> TensorId {
        let (rows, cols) = self.shape(x);
        let dims = (self.weight_shape)(weight);
        assert_eq!(dims[0], cols, "linear: input has {cols} columns, weight expects {}", dims[0]);
        let out = dims.get(1).copied().unwrap_or(1);
        if let Some(b) = bias {
            assert_eq!((self.weight_shape)(b)[0], out, "linear: bias length");
        }
        self.push(Op::Linear { x, weight, bias }, rows, out)
    }

    /// RMS norm over groups of `group` columns.
    pub fn rms_norm(&mut self, x: TensorId, weight: Option<WeightId>, eps: f32, group: usize) -> TensorId {
        let (rows, cols) = self.shape(x);
        assert!(group > 0 && cols % group == 0, "rms_norm: group {group} does not divide {cols}");
        if let Some(w) = weight {
            assert_eq!((self.weight_shape)(w)[0], group, "rms_norm: weight length");
        }
        self.push(Op::RmsNorm { x, weight, eps, group: group as u32 }, rows, cols)
    }

    /// RoPE.
    pub fn rope(&mut self, x: TensorId, params: RopeParams) -> TensorId {
        let (rows, cols) = self.shape(x);
        assert!(cols % params.head_dim as usize == 0 && params.n_rot <= params.head_dim, "rope: shape");
        self.push(Op::Rope { x, params }, rows, cols)
    }

    /// Attention.
    pub fn attention(&mut self, q: TensorId, k: TensorId, v: TensorId, params: AttnParams) -> TensorId {
        let (rows, qc) = self.shape(q);
        assert_eq!(qc, (params.n_head * params.head_dim_k) as usize, "attention: q width");
        assert_eq!(self.shape(k), (rows, (params.n_kv_head * params.head_dim_k) as usize), "attention: k shape");
        assert_eq!(self.shape(v), (rows, (params.n_kv_head * params.head_dim_v) as usize), "attention: v shape");
        assert!(params.n_head % params.n_kv_head == 0, "attention: heads not a multiple of kv heads");
        assert!(params.window.is_none() || params.chunk.is_none(), "attention: both a window and chunks");
        assert!(params.chunk != Some(0) && params.window != Some(0), "attention: empty window or chunk");
        self.push(Op::Attention { q, k, v, params }, rows, (params.n_head * params.head_dim_v) as usize)
    }

    /// `a + b`.
    pub fn add(&mut self, a: TensorId, b: TensorId) -> TensorId {
        let (r, c) = self.same_shape("add", a, b);
        self.push(Op::Add { a, b }, r, c)
    }

    /// `a * b`.
    pub fn mul(&mut self, a: TensorId, b: TensorId) -> TensorId {
        let (r, c) = self.same_shape("mul", a, b);
        self.push(Op::Mul { a, b }, r, c)
    }

    /// `x * s`.
    pub fn scale(&mut self, x: TensorId, s: f32) -> TensorId {
        let (r, c) = self.shape(x);
        self.push(Op::Scale { x, s }, r, c)
    }

    /// Rows scaled by their position's temperature factor.
    pub fn temp_scale(&mut self, x: TensorId, params: TempScaleParams) -> TensorId {
        assert!(params.floor_scale > 0, "temp_scale: floor_scale must be positive");
        let (r, c) = self.shape(x);
        assert_eq!(r, self.n_tokens, "temp_scale: input must have one row per token");
        self.push(Op::TempScale { x, params }, r, c)
    }

    /// `act(gate) * up`.
    pub fn glu(&mut self, gate: TensorId, up: TensorId, act: Activation) -> TensorId {
        let (r, c) = self.same_shape("glu", gate, up);
        self.push(Op::Glu { gate, up, act }, r, c)
    }

    /// `cap * tanh(x / cap)`.
    pub fn softcap(&mut self, x: TensorId, cap: f32) -> TensorId {
        let (r, c) = self.shape(x);
        self.push(Op::Softcap { x, cap }, r, c)
    }

    /// Mixture-of-experts FFN (see [`Op::Moe`]).
    pub fn moe(&mut self, x: TensorId, logits: TensorId, p: MoeParams) -> TensorId {
        let (rows, cols) = self.shape(x);
        assert_eq!(self.shape(logits), (rows, p.n_expert as usize), "moe: router logits shape");
        assert!(p.n_used >= 1 && p.n_used <= p.n_expert, "moe: {} of {} experts", p.n_used, p.n_expert);
        let (first, held) = p.held_experts();
        assert!(held >= 1 && first + held <= p.n_expert, "moe: experts {first}+{held} of {}", p.n_expert);
        // The expert tensors hold the op's slice; the router and scales rank all experts.
        let (ne, ff) = (held as usize, p.n_ff as usize);
        let dims = |w: WeightId| (self.weight_shape)(w);
        match p.gate_up {
            ExpertGateUp::Separate { gate, up } => {
                assert_eq!(dims(gate), vec![cols, ff, ne], "moe: gate_exps shape");
                assert_eq!(dims(up), vec![cols, ff, ne], "moe: up_exps shape");
            }
            ExpertGateUp::Fused(gu) => assert_eq!(dims(gu), vec![cols, 2 * ff, ne], "moe: gate_up_exps shape"),
        }
        let down = dims(p.down);
        assert!(down.len() == 3 && down[0] == ff && down[2] == ne, "moe: down_exps shape {down:?}");
        let out = down[1];
        if let Some(s) = p.expert_scale {
            assert_eq!(dims(s)[0], p.n_expert as usize, "moe: expert scale length");
        }
        let same_kind = matches!(
            (p.gate_up, p.gate_up_bias),
            (_, None)
                | (ExpertGateUp::Separate { .. }, Some(ExpertGateUp::Separate { .. }))
                | (ExpertGateUp::Fused(_), Some(ExpertGateUp::Fused(_)))
        );
        assert!(same_kind, "moe: gate/up biases must be split like the gate/up weights");
        match p.gate_up_bias {
            Some(ExpertGateUp::Separate { gate, up }) => {
                assert_eq!(dims(gate), vec![ff, ne], "moe: gate bias shape");
                assert_eq!(dims(up), vec![ff, ne], "moe: up bias shape");
            }
            Some(ExpertGateUp::Fused(gu)) => assert_eq!(dims(gu), vec![2 * ff, ne], "moe: gate_up bias shape"),
            None => {}
        }
        if let Some(b) = p.down_bias {
            assert_eq!(dims(b), vec![out, ne], "moe: down bias shape");
        }
        if let Some(sh) = p.shared {
            let g = dims(sh.gate);
            assert!(g.len() == 2 && g[0] == cols, "moe: shared gate shape {g:?}");
            assert_eq!(dims(sh.up), g, "moe: shared up shape");
            assert_eq!(dims(sh.down), vec![g[1], out], "moe: shared down shape");
            if let Some(gi) = sh.gate_inp {
                assert_eq!(dims(gi)[0], cols, "moe: shared gate input length");
            }
        }
        self.push(Op::Moe { x, logits, params: p }, rows, out)
    }

    /// Columns `[offset, offset + len)` of each `period` columns (see [`Op::SliceCols`]).
    pub fn slice_cols(&mut self, x: TensorId, period: usize, offset: usize, len: usize) -> TensorId {
        let (rows, cols) = self.shape(x);
        assert!(period > 0 && cols % period == 0, "slice_cols: period {period} does not divide {cols}");
        assert!(len > 0 && offset + len <= period, "slice_cols: [{offset}, +{len}) outside {period}");
        let p = Op::SliceCols { x, period: period as u32, offset: offset as u32, len: len as u32 };
        self.push(p, rows, cols / period * len)
    }

    /// Causal depthwise convolution (see [`Conv1dParams`]).
    pub fn conv1d(&mut self, x: TensorId, params: Conv1dParams) -> TensorId {
        let (rows, cols) = self.shape(x);
        assert_eq!(rows, self.n_tokens, "conv1d: input must have one row per token");
        assert_eq!((self.weight_shape)(params.weight), vec![params.kernel as usize, cols], "conv1d: weight shape");
        assert!(params.kernel >= 1, "conv1d: empty kernel");
        self.push(Op::Conv1d { x, params }, rows, cols)
    }

    /// Gated delta rule (see [`DeltaNetParams`]).
    pub fn delta_net(
        &mut self,
        q: TensorId,
        k: TensorId,
        v: TensorId,
        alpha: TensorId,
        beta: TensorId,
        p: DeltaNetParams,
    ) -> TensorId {
        let rows = self.n_tokens;
        let (hk, hv, d) = (p.n_k_head as usize, p.n_v_head as usize, p.head_dim as usize);
        assert!(hk > 0 && hv % hk == 0, "delta_net: {hv} value heads over {hk} key heads");
        assert_eq!(self.shape(q), (rows, hk * d), "delta_net: q shape");
        assert_eq!(self.shape(k), (rows, hk * d), "delta_net: k shape");
        assert_eq!(self.shape(v), (rows, hv * d), "delta_net: v shape");
        assert_eq!(self.shape(alpha), (rows, hv), "delta_net: alpha shape");
        assert_eq!(self.shape(beta), (rows, hv), "delta_net: beta shape");
        assert_eq!((self.weight_shape)(p.decay)[0], hv, "delta_net: decay length");
        self.push(Op::DeltaNet { q, k, v, alpha, beta, params: p }, rows, hv * d)
    }

    /// Keep the output rows only.
    pub fn output_rows(&mut self, x: TensorId) -> TensorId {
        let (r, c) = self.shape(x);
        assert_eq!(r, self.n_tokens, "output_rows: input must have one row per token");
        if self.n_outputs == self.n_tokens {
            // Still record the op: the output order is given by StepInputs::output_rows.
        }
        self.push(Op::OutputRows { x }, self.n_outputs, c)
    }

    /// Finish; the last node added is the output.
    pub fn finish(self) -> Graph {
        assert!(!self.nodes.is_empty(), "empty graph");
        Graph { nodes: self.nodes, n_tokens: self.n_tokens, n_outputs: self.n_outputs }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs are freed after their last reader: a chain holds two at a time, a skip
    /// connection keeps its source alive until the add.
    #[test]
    fn activation_bytes_follow_last_uses() {
        let shape = |w: WeightId| if w.0 == 0 { vec![8, 100] } else { vec![8, 8] };
        let row = 8 * 4 * 3; // 3 tokens of 8 f32
        let mut b = GraphBuilder::new(3, 3, &shape);
        let x = b.embed(WeightId(0));
        let y = b.linear(x, WeightId(1), None);
        let z = b.linear(y, WeightId(1), None);
        b.linear(z, WeightId(1), None);
        assert_eq!(b.finish().activation_bytes(), 2 * row);
        let mut b = GraphBuilder::new(3, 3, &shape);
        let x = b.embed(WeightId(0));
        let y = b.linear(x, WeightId(1), None);
        let z = b.linear(y, WeightId(1), None);
        b.add(x, z);
        assert_eq!(b.finish().activation_bytes(), 3 * row);
    }

    /// The matrix view of a tensor folds every outer dimension into rows.
    #[test]
    fn shapes_of_every_rank_view_as_matrices() {
        for (dims, rows, cols) in [(&[7][..], 1, 7), (&[3, 5], 3, 5), (&[2, 3, 4], 6, 4), (&[2, 3, 4, 5], 24, 5)] {
            let s = Shape::new(dims);
            assert_eq!((s.dims(), s.rows(), s.cols(), s.elements()), (dims, rows, cols, rows * cols));
        }
        assert_eq!(Shape::matrix(3, 5), Shape::new(&[3, 5]));
    }

    #[test]
    #[should_panic(expected = "1 to 4 dimensions")]
    fn five_dimensions_are_refused() {
        Shape::new(&[1, 2, 3, 4, 5]);
    }

    /// A node's bytes follow its type: an i32 `[3, 2, 8]` and an f16 `[3, 8]` tensor.
    #[test]
    fn activation_bytes_count_each_type_at_its_size() {
        let shape = |_: WeightId| vec![8, 100];
        let mut b = GraphBuilder::new(3, 3, &shape);
        let x = b.embed(WeightId(0));
        let ids = b.push_typed(Op::OutputRows { x }, Shape::new(&[3, 2, 8]), DType::I32);
        assert_eq!(b.node(ids).bytes(), 3 * 2 * 8 * 4);
        let half = b.push_typed(Op::OutputRows { x }, Shape::matrix(3, 8), DType::F16);
        assert_eq!(b.node(half).bytes(), 3 * 8 * 2);
        // The embedding lives to the last node; the unread ids die after themselves, so the
        // peak is the embedding beside the ids.
        assert_eq!(b.finish().activation_bytes(), 3 * 8 * 4 + 3 * 2 * 8 * 4);
    }

    /// Ops that read activations refuse an index tensor (a model-file bug, caught as the
    /// graph is built).
    #[test]
    #[should_panic(expected = "read as f32 activations")]
    fn an_index_tensor_is_not_an_activation() {
        let shape = |_: WeightId| vec![8, 8];
        let mut b = GraphBuilder::new(3, 3, &shape);
        let x = b.embed(WeightId(0));
        let ids = b.push_typed(Op::OutputRows { x }, Shape::matrix(3, 8), DType::I32);
        b.linear(ids, WeightId(1), None);
    }
}
