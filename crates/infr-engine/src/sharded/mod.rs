//! One model across several devices that all run every layer, each holding a share of the
//! layers' weights: the devices' partial outputs are summed through host memory (an
//! all-reduce) after each divided block and handed to all of them for the next one.
//!
//! Two ways to divide a model:
//! - expert parallel (`multi.expert_parallel`, [`experts`]): every MoE layer's experts, an even
//!   share each (the expert dimension of the 3-D tensors); attention runs whole on every device.
//! - tensor parallel (`multi.tensor_parallel`, [`tensors`]): attention by heads (Q/K/V rows
//!   and the KV cache by KV-head groups, the output projection's input columns) and gated
//!   FFNs by their hidden columns (gate/up rows, down's input columns), the way Megatron-LM
//!   splits a transformer block (Shoeybi et al., 2019); MoE layers by experts as above.
//!
//! A divided block's output (the attention or FFN projection, or the MoE op) is a partial sum
//! on each device. The step graph is cut at the residual add that reads it: the first device
//! computes `h + part_0`, the others `part_d` alone, the host adds them, and every device's
//! next segment starts from the sum (`Op::Input`); the devices of a segment run at once, a
//! thread each. Blocks that do not fit the pattern (a norm after the projection, as Gemma's
//! post-norms; a fused projection) run whole on every device.

mod experts;
mod tensors;

use std::collections::HashMap;
use std::sync::{mpsc, Arc};

use infr_core::{
    Backend, BackendError, DeviceInfo, Graph, KvSpec, LogitAdjust, Node, Op, PlanId, StepInputs, TensorId, WeightData,
    WeightId, WeightInfo, WeightPlace,
};
use infr_models::Model;

use crate::EngineError;

pub use experts::expert_slices;

/// How one weight is divided: per device, `(first, count)` along one dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WeightCut {
    /// The outermost dimension: output rows of a matrix, experts of a 3-D tensor, elements of
    /// a vector.
    Outer(Vec<(usize, usize)>),
    /// The innermost dimension: input columns of a matrix (block aligned).
    Inner(Vec<(usize, usize)>),
}

/// A step graph divided among `n` devices: where the partial sums are added, what each
/// device computes differently, which weights it holds a part of and how many KV heads of
/// each cache layer.
#[derive(Debug, Clone)]
pub(crate) struct Sharding {
    /// (node whose output is a partial sum on every device, the residual add reading it),
    /// in graph order.
    pub cuts: Vec<(usize, usize)>,
    /// Per device: nodes that differ from the graph's (sliced shapes and parameters).
    pub nodes: Vec<HashMap<usize, Node>>,
    pub weights: HashMap<WeightId, WeightCut>,
    /// Per device: KV cache layer → the KV heads it holds (layers not named are whole).
    pub kv_heads: Vec<HashMap<u32, u32>>,
}

impl Sharding {
    fn new(n: usize) -> Self {
        Self {
            cuts: Vec::new(),
            nodes: vec![HashMap::new(); n],
            weights: HashMap::new(),
            kv_heads: vec![HashMap::new(); n],
        }
    }

    fn devices(&self) -> usize {
        self.nodes.len()
    }

    /// Record `cut` for `id`; a weight cut two ways is refused.
    fn cut_weight(&mut self, id: WeightId, cut: WeightCut) -> Result<(), String> {
        match self.weights.get(&id) {
            Some(old) if *old != cut => Err(format!("weight {} is read by two blocks cut differently", id.0)),
            _ => {
                self.weights.insert(id, cut);
                Ok(())
            }
        }
    }
}

/// Which nodes read each node.
pub(crate) fn consumers(graph: &Graph) -> Vec<Vec<usize>> {
    let mut c: Vec<Vec<usize>> = vec![Vec::new(); graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        for t in node.op.inputs() {
            c[t.0 as usize].push(i);
        }
    }
    c
}

/// The add that is the only reader of node `i`, if `i`'s output goes straight into the
/// residual stream (the add's other input is not `i` itself).
pub(crate) fn residual_add(graph: &Graph, consumers: &[Vec<usize>], i: usize) -> Option<usize> {
    match consumers[i].as_slice() {
        [a] => match graph.nodes[*a].op {
            Op::Add { a: x, b: y } if (x.0 as usize == i) != (y.0 as usize == i) => Some(*a),
            _ => None,
        },
        _ => None,
    }
}

/// `total` units split evenly over `n` devices: `(first, count)` each.
pub(crate) fn even(total: usize, n: usize) -> Vec<(usize, usize)> {
    let bound = |d: usize| d * total / n;
    (0..n).map(|d| (bound(d), bound(d + 1) - bound(d))).collect()
}

/// `node` with its innermost dimension set to `cols`.
pub(crate) fn with_cols(node: &Node, cols: usize) -> Node {
    let mut dims = node.shape.dims().to_vec();
    *dims.last_mut().expect("a shape has a dimension") = cols;
    Node { shape: infr_core::Shape::new(&dims), ..node.clone() }
}

/// The graph cut at `sh.cuts` into segments: per segment, the graph each device runs (one
/// graph, on the first device, for the last segment). A segment after the first starts with
/// the sum of the previous one (`Op::Input`); only that crosses a cut.
fn split_graph(graph: &Graph, sh: &Sharding) -> Result<Vec<Vec<Graph>>, String> {
    let n = graph.nodes.len();
    let mut ranges: Vec<(usize, usize, Option<usize>)> = Vec::with_capacity(sh.cuts.len() + 1);
    let mut start = 0usize;
    for &(part, add) in &sh.cuts {
        if part < start || add < part {
            return Err(format!("node {part}'s partial sum is not added within its segment"));
        }
        ranges.push((start, add + 1, Some(part)));
        start = add + 1;
    }
    ranges.push((start, n, None));
    let mut segments = Vec::with_capacity(ranges.len());
    let mut hand_on: Option<TensorId> = None;
    for (from, to, part) in ranges {
        if from >= to {
            return Err("a divided block's residual add is the graph's output".into());
        }
        let devices = if part.is_some() { sh.devices() } else { 1 };
        let mut per_device = Vec::with_capacity(devices);
        for d in 0..devices {
            let mut nodes: Vec<Node> = Vec::with_capacity(to - from + 2);
            let mut new_id: HashMap<TensorId, TensorId> = HashMap::new();
            if let Some(t) = hand_on {
                let src = graph.node(t);
                nodes.push(Node { op: Op::Input, shape: src.shape, dtype: src.dtype, label: src.label.clone() });
                new_id.insert(t, TensorId(0));
            }
            for i in from..to {
                // The other devices hand on their part alone.
                if d > 0 && part.is_some() && i == to - 1 {
                    continue;
                }
                let mut node = sh.nodes[d].get(&i).cloned().unwrap_or_else(|| graph.nodes[i].clone());
                let mut outside = None;
                node.op.map_inputs(|t| {
                    new_id.get(&t).copied().unwrap_or_else(|| {
                        outside = Some(t);
                        t
                    })
                });
                if let Some(t) = outside {
                    return Err(format!(
                        "node {i} ({}) reads node {} across an all-reduce (only the residual crosses)",
                        node.op.name(),
                        t.0
                    ));
                }
                new_id.insert(TensorId(i as u32), TensorId(nodes.len() as u32));
                nodes.push(node);
            }
            if let (true, Some(p)) = (d > 0, part) {
                // The part is the output (a copy where it is not the last node).
                let mine = new_id[&TensorId(p as u32)];
                if mine.0 as usize != nodes.len() - 1 {
                    let src = nodes[mine.0 as usize].clone();
                    nodes.push(Node { op: Op::Scale { x: mine, s: 1.0 }, ..src });
                }
            }
            per_device.push(Graph { nodes, n_tokens: graph.n_tokens, n_outputs: graph.n_outputs });
        }
        segments.push(per_device);
        hand_on = Some(TensorId(to as u32 - 1));
    }
    Ok(segments)
}

/// Device `d`'s part of `weight` under `cut`.
fn cut_weight(weight: &WeightData, cut: &WeightCut, d: usize) -> Result<WeightData, BackendError> {
    let bad = |why: &str| BackendError::InvalidInput(format!("{}: {why} ({:?})", weight.name, weight.info.dims));
    let dims = &weight.info.dims;
    let (mut new_dims, bytes) = match cut {
        WeightCut::Outer(parts) => {
            let (first, count) = parts[d];
            let n = *dims.last().ok_or_else(|| bad("no dimensions"))?;
            if n == 0 || weight.bytes.len() % n != 0 || first + count > n {
                return Err(bad("outer dimension does not divide its bytes"));
            }
            let per = weight.bytes.len() / n;
            let mut nd = dims.clone();
            *nd.last_mut().expect("checked above") = count;
            (nd, weight.bytes[first * per..(first + count) * per].to_vec())
        }
        WeightCut::Inner(parts) => {
            let (first, count) = parts[d];
            let k = dims[0];
            let ty = weight.info.ty;
            let (Some(row), Some(skip), Some(take)) = (ty.row_bytes(k), ty.row_bytes(first), ty.row_bytes(count))
            else {
                return Err(bad("columns not block aligned"));
            };
            if first + count > k || row == 0 || weight.bytes.len() % row != 0 {
                return Err(bad("columns out of range"));
            }
            let mut out = Vec::with_capacity(weight.bytes.len() / row * take);
            for r in weight.bytes.chunks_exact(row) {
                out.extend_from_slice(&r[skip..skip + take]);
            }
            let mut nd = dims.clone();
            nd[0] = count;
            (nd, out)
        }
    };
    if new_dims.is_empty() {
        new_dims.push(0);
    }
    Ok(WeightData {
        name: weight.name.clone(),
        info: WeightInfo { ty: weight.info.ty, dims: new_dims },
        bytes: infr_core::TensorData::from_vec(bytes),
    })
}

/// How a model is divided: by experts only, or by heads, FFN columns and experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Experts,
    Tensors,
}

impl Mode {
    fn analyze(self, graph: &Graph, n: usize, infos: &HashMap<WeightId, WeightInfo>) -> Result<Sharding, String> {
        match self {
            Mode::Experts => experts::expert_sharding(graph, n),
            Mode::Tensors => tensors::tensor_sharding(graph, n, infos),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Experts => "expert parallel",
            Mode::Tensors => "tensor parallel",
        }
    }
}

/// Several backends running one model, each holding a share of its divided weights (see
/// the module doc).
pub struct ShardedBackend {
    devices: Vec<Box<dyn Backend>>,
    info: DeviceInfo,
    mode: Mode,
    infos: HashMap<WeightId, WeightInfo>,
    /// The model's division (from a one-token graph; every compiled graph must agree).
    sharding: Sharding,
    /// Each plan's segments: per segment, the plan of each device taking part.
    plans: Vec<Vec<Vec<PlanId>>>,
    /// Bytes of the divided weights (whole), and each device's share of them.
    split_bytes: u64,
    shares: Vec<f64>,
}

impl ShardedBackend {
    /// `devices` (at least two) dividing `model`'s experts evenly (`multi.expert_parallel`).
    /// Refuses a model without MoE layers or whose MoE output is not added straight to the
    /// residual (Gemma 4's post-norms).
    pub fn expert_parallel(devices: Vec<Box<dyn Backend>>, model: &Model) -> Result<Self, EngineError> {
        Self::new(devices, model, Mode::Experts)
    }

    /// `devices` (at least two) dividing `model`'s attention heads, FFN columns and experts
    /// (`multi.tensor_parallel`). Refuses a model where nothing divides (KV heads fewer than
    /// the devices, projections not block aligned at the cut, norms after every projection).
    pub fn tensor_parallel(devices: Vec<Box<dyn Backend>>, model: &Model) -> Result<Self, EngineError> {
        Self::new(devices, model, Mode::Tensors)
    }

    fn new(devices: Vec<Box<dyn Backend>>, model: &Model, mode: Mode) -> Result<Self, EngineError> {
        let refuse = |why: String| EngineError::Invalid(format!("{} does not apply to the model: {why}", mode.name()));
        if devices.len() < 2 {
            return Err(refuse(format!("it needs at least two devices, not {}", devices.len())));
        }
        if model.diffusion().is_some() {
            return Err(refuse("diffusion models do not run across devices yet".into()));
        }
        let infos: HashMap<WeightId, WeightInfo> =
            model.weights.iter().map(|(id, _)| (id, model.weights.info(id).clone())).collect();
        let probe = model.graph(1, 1);
        let sharding = mode.analyze(&probe, devices.len(), &infos).map_err(refuse)?;
        split_graph(&probe, &sharding).map_err(refuse)?;
        let split_bytes: u64 = sharding.weights.keys().map(|id| infos[id].bytes()).sum();
        let mut shares = vec![0.0f64; devices.len()];
        for (id, cut) in &sharding.weights {
            let bytes = infos[id].bytes() as f64;
            let (parts, whole) = match cut {
                WeightCut::Outer(p) => (p, infos[id].dims.last().copied().unwrap_or(1)),
                WeightCut::Inner(p) => (p, infos[id].dims[0]),
            };
            for (s, &(_, count)) in shares.iter_mut().zip(parts) {
                *s += bytes * count as f64 / whole.max(1) as f64 / split_bytes.max(1) as f64;
            }
        }
        let ids: Vec<String> = devices.iter().map(|b| b.device().id.clone()).collect();
        let features: Vec<String> = ids
            .iter()
            .enumerate()
            .map(|(d, id)| {
                let experts = sharding.nodes[d].values().find_map(|n| match &n.op {
                    Op::Moe { params, .. } => params.expert_slice,
                    _ => None,
                });
                match (mode, experts) {
                    (Mode::Experts, Some((first, count))) => {
                        format!("expert parallel: experts {first}..{} on {id}", first + count)
                    }
                    _ => format!(
                        "{}: {:.0}% of the weights of {} divided blocks ({} MiB) on {id}",
                        mode.name(),
                        shares[d] * 100.0,
                        sharding.cuts.len(),
                        split_bytes >> 20
                    ),
                }
            })
            .collect();
        for f in &features {
            tracing::info!("{f}");
        }
        let info = DeviceInfo {
            id: ids.join("+"),
            name: format!("{} over {} devices", mode.name(), devices.len()),
            memory_bytes: devices.iter().map(|b| b.device().memory_bytes).sum(),
            features,
        };
        Ok(Self { devices, info, mode, infos, sharding, plans: Vec::new(), split_bytes, shares })
    }

    /// How many blocks (attention, FFN, MoE) are divided among the devices.
    pub fn divided_blocks(&self) -> usize {
        self.sharding.cuts.len()
    }

    /// Run every segment but the last (all devices at once, each on its own thread; their
    /// outputs summed in device order); returns the last segment's plan and the sum it takes.
    fn run_front(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<(PlanId, Vec<f32>), BackendError> {
        let segments =
            self.plans.get(plan.0 as usize).ok_or_else(|| BackendError::InvalidInput(format!("no plan {}", plan.0)))?;
        let (last, front) = segments.split_last().expect("a plan has segments");
        if front.is_empty() {
            return Ok((last[0], Vec::new()));
        }
        let n = self.devices.len();
        let (first, others) = self.devices.split_at_mut(1);
        std::thread::scope(|s| {
            // One worker per other device: it takes each segment's input, hands back its part.
            let (part_tx, part_rx) = mpsc::channel::<(usize, Result<Vec<f32>, BackendError>)>();
            let mut to_workers = Vec::with_capacity(others.len());
            for (i, dev) in others.iter_mut().enumerate() {
                let d = i + 1;
                let (tx, rx) = mpsc::channel::<Arc<Vec<f32>>>();
                to_workers.push(tx);
                let part_tx = part_tx.clone();
                let plans: Vec<PlanId> = front.iter().map(|seg| seg[d]).collect();
                s.spawn(move || {
                    for p in plans {
                        let Ok(hidden) = rx.recv() else { return };
                        // A panic is answered as an error, so the host never waits on it.
                        let run = || dev.execute(p, &StepInputs { hidden: &hidden, ..*inputs });
                        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
                            Err(BackendError::Device(format!("device {d} panicked running its part of a step")))
                        });
                        let failed = out.is_err();
                        if part_tx.send((d, out)).is_err() || failed {
                            return;
                        }
                    }
                });
            }
            drop(part_tx);
            let mut hidden: Arc<Vec<f32>> = Arc::new(Vec::new());
            for seg in front {
                for tx in &to_workers {
                    // A worker that stopped has sent its error; it is read below.
                    let _ = tx.send(Arc::clone(&hidden));
                }
                let mut sum = first[0].execute(seg[0], &StepInputs { hidden: &hidden, ..*inputs })?;
                let mut parts: Vec<Option<Vec<f32>>> = vec![None; n];
                for _ in 1..n {
                    let (d, out) =
                        part_rx.recv().map_err(|_| BackendError::Device("a device's worker thread stopped".into()))?;
                    parts[d] = Some(out?);
                }
                for part in parts.into_iter().flatten() {
                    if part.len() != sum.len() {
                        return Err(BackendError::InvalidInput(format!(
                            "a device's part holds {} values, the first device's {}",
                            part.len(),
                            sum.len()
                        )));
                    }
                    sum.iter_mut().zip(&part).for_each(|(s, v)| *s += v);
                }
                hidden = Arc::new(sum);
            }
            Ok((last[0], Arc::try_unwrap(hidden).unwrap_or_else(|h| h.as_ref().clone())))
        })
    }
}

impl Backend for ShardedBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn supports(&self, node: &Node) -> Result<(), String> {
        crate::pipeline::all_support(&self.devices, node)
    }

    /// The tightest of the devices' output limits: any of them may produce the logits.
    fn max_output_bytes(&self) -> Option<u64> {
        self.devices.iter().filter_map(|b| b.max_output_bytes()).min()
    }

    /// What the whole model may take so that every device fits its part: each holds all of it
    /// but the divided weights outside its share, so per device (stages with one id share it:
    /// `k` of them holding a share `c` of the divided bytes `E`) `k (X - E) + c E <= free`;
    /// the tightest device decides.
    fn memory_available(&self) -> Option<u64> {
        let mut devices: HashMap<&str, (u64, u64, f64)> = HashMap::new();
        for (b, &share) in self.devices.iter().zip(&self.shares) {
            let avail = b.memory_available()?;
            let e = devices.entry(b.device().id.as_str()).or_insert((avail, 0, 0.0));
            e.0 = e.0.min(avail);
            e.1 += 1;
            e.2 += share;
        }
        let split = self.split_bytes as f64;
        devices
            .values()
            .map(|&(avail, copies, share)| ((avail as f64 - share * split).max(0.0) / copies as f64 + split) as u64)
            .min()
    }

    fn load_weight(&mut self, id: WeightId, weight: &WeightData) -> Result<(), BackendError> {
        self.load_weight_placed(id, weight, WeightPlace::Device)
    }

    fn load_weight_placed(&mut self, id: WeightId, weight: &WeightData, _: WeightPlace) -> Result<(), BackendError> {
        for d in 0..self.devices.len() {
            match self.sharding.weights.get(&id) {
                Some(cut) => {
                    let part = cut_weight(weight, cut, d)?;
                    self.devices[d].load_weight(id, &part)?;
                }
                None => self.devices[d].load_weight(id, weight)?,
            }
        }
        Ok(())
    }

    fn init_kv(&mut self, spec: &KvSpec) -> Result<(), BackendError> {
        for (d, b) in self.devices.iter_mut().enumerate() {
            let mut mine = spec.clone();
            for (&layer, &heads) in &self.sharding.kv_heads[d] {
                let l = mine.layers.get_mut(layer as usize).ok_or_else(|| {
                    BackendError::InvalidInput(format!("the KV spec has no layer {layer} for a divided attention"))
                })?;
                l.n_kv_head = heads;
            }
            b.init_kv(&mine)?;
        }
        Ok(())
    }

    fn compile(&mut self, graph: &Graph) -> Result<PlanId, BackendError> {
        let unsupported = |what: String| BackendError::Unsupported { backend: self.info.id.clone(), what };
        let sh = self.mode.analyze(graph, self.devices.len(), &self.infos).map_err(unsupported)?;
        if sh.weights != self.sharding.weights || sh.kv_heads != self.sharding.kv_heads {
            return Err(unsupported("a step graph divides differently from the model's one-token graph".into()));
        }
        let segments = split_graph(graph, &sh).map_err(unsupported)?;
        let mut plan = Vec::with_capacity(segments.len());
        for seg in segments {
            let mut plans = Vec::with_capacity(seg.len());
            for (d, g) in seg.iter().enumerate() {
                plans.push(self.devices[d].compile(g)?);
            }
            plan.push(plans);
        }
        self.plans.push(plan);
        Ok(PlanId(self.plans.len() as u32 - 1))
    }

    fn execute(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<Vec<f32>, BackendError> {
        let (last, hidden) = self.run_front(plan, inputs)?;
        self.devices[0].execute(last, &StepInputs { hidden: &hidden, ..*inputs })
    }

    fn execute_top_k(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
        k: usize,
        adjust: &[Vec<LogitAdjust>],
    ) -> Result<Vec<Vec<(u32, f32)>>, BackendError> {
        let (last, hidden) = self.run_front(plan, inputs)?;
        self.devices[0].execute_top_k(last, &StepInputs { hidden: &hidden, ..*inputs }, k, adjust)
    }

    fn prepare_top_k(&mut self, plan: PlanId, k: usize) -> Result<(), BackendError> {
        let last = self
            .plans
            .get(plan.0 as usize)
            .and_then(|p| p.last())
            .map(|seg| seg[0])
            .ok_or_else(|| BackendError::InvalidInput(format!("no plan {}", plan.0)))?;
        self.devices[0].prepare_top_k(last, k)
    }

    fn copy_kv_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        self.devices.iter_mut().try_for_each(|b| b.copy_kv_pages(pairs))
    }

    fn copy_state(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        self.devices.iter_mut().try_for_each(|b| b.copy_state(pairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infr_core::GgmlType;

    fn data(ty: GgmlType, dims: &[usize], bytes: Vec<u8>) -> WeightData {
        WeightData {
            name: "w".into(),
            info: WeightInfo { ty, dims: dims.to_vec() },
            bytes: infr_core::TensorData::from_vec(bytes),
        }
    }

    #[test]
    fn outer_cut_takes_whole_rows() {
        // f32 [2 cols, 3 rows]: rows 1..3.
        let w = data(GgmlType::F32, &[2, 3], (0u8..24).collect());
        let part = cut_weight(&w, &WeightCut::Outer(vec![(0, 1), (1, 2)]), 1).unwrap();
        assert_eq!(part.info.dims, vec![2, 2]);
        assert_eq!(part.bytes.to_vec(), (8u8..24).collect::<Vec<_>>());
    }

    #[test]
    fn inner_cut_takes_aligned_columns_of_every_row() {
        // q8_0 rows of 64 columns = 2 blocks of 34 bytes; the second block of each of 2 rows.
        let w = data(GgmlType::Q8_0, &[64, 2], (0..136).map(|b| b as u8).collect());
        let part = cut_weight(&w, &WeightCut::Inner(vec![(0, 32), (32, 32)]), 1).unwrap();
        assert_eq!(part.info.dims, vec![32, 2]);
        let want: Vec<u8> = (34..68).chain(102..136).map(|b| b as u8).collect();
        assert_eq!(part.bytes.to_vec(), want);
        // Not at a block boundary: refused.
        assert!(cut_weight(&w, &WeightCut::Inner(vec![(0, 16), (16, 48)]), 1).is_err());
    }

    #[test]
    fn even_splits_cover_everything() {
        assert_eq!(even(8, 2), vec![(0, 4), (4, 4)]);
        assert_eq!(even(3, 2), vec![(0, 1), (1, 2)]);
    }
}
