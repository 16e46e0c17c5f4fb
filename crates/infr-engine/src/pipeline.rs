//! One model across several devices, layer by layer (`multi.pipeline`): each device holds the
//! weights, KV cache and recurrent state of a contiguous run of layers, and a step runs the
//! devices in turn, each handing the activations it made to the next through host memory
//! (llama.cpp's `--split-mode layer`). [`PipelineBackend`] is itself a [`Backend`], so the
//! runner, the scheduler and the server drive it as they drive one device.
//!
//! A step graph is cut into one piece per device: every node runs on the device of the latest
//! layer it reads (its label `blk.N`, the layer of its weight) or of its inputs, whichever is
//! later; a piece after the first starts with an [`Op::Input`] node standing for the one
//! tensor the previous piece hands on (the residual stream in every model here). A model whose
//! cut would carry more than one tensor, or whose layers read another device's KV cache, is
//! refused up front with the reason.

use std::collections::HashMap;

use infr_core::{
    Backend, BackendError, DeviceInfo, Graph, KvSpec, LogitAdjust, Node, Op, PlanId, StepInputs, TensorId, WeightData,
    WeightId, WeightPlace,
};
use infr_models::Model;

use crate::EngineError;

/// The layers each of `n` devices runs for a model of `n_layer` layers: the first layer of
/// each device and `n_layer` at the end (`n + 1` bounds). `shares` weighs the devices (as
/// llama.cpp's `--tensor-split`; empty = even); every device gets at least one layer.
pub fn layer_bounds(n_layer: usize, n: usize, shares: &[f64]) -> Result<Vec<usize>, EngineError> {
    if n < 2 {
        return Err(EngineError::Invalid(format!("a pipeline needs at least two devices, got {n}")));
    }
    if n_layer < n {
        return Err(EngineError::Invalid(format!(
            "{n} devices for a model of {n_layer} layers: one device per layer at most"
        )));
    }
    let shares: Vec<f64> = if shares.is_empty() { vec![1.0; n] } else { shares.to_vec() };
    if shares.len() != n || shares.iter().any(|s| !s.is_finite() || *s <= 0.0) {
        return Err(EngineError::Invalid(format!(
            "the layer split needs one positive share per device ({n}), got {shares:?}"
        )));
    }
    let total: f64 = shares.iter().sum();
    let mut bounds = vec![0usize];
    let mut acc = 0.0;
    for (s, share) in shares.iter().enumerate().take(n - 1) {
        acc += share;
        let want = (acc / total * n_layer as f64).round() as usize;
        // At least one layer for this device and for each one after it.
        let b = want.max(bounds[s] + 1).min(n_layer - (n - 1 - s));
        bounds.push(b);
    }
    bounds.push(n_layer);
    Ok(bounds)
}

/// Parse a split such as `3,1` (empty: even).
pub fn parse_split(s: &str) -> Result<Vec<f64>, EngineError> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<f64>().map_err(|_| EngineError::Invalid(format!("bad layer share '{p}' in split '{s}'"))))
        .collect()
}

/// The layer of a `blk.N` weight name or node label.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok())
}

/// The device of layer `l` under `bounds` (each device's first layer, the layer count last).
fn stage_of(bounds: &[usize], l: usize) -> usize {
    bounds[1..].iter().position(|&b| l < b).unwrap_or(bounds.len() - 2)
}

/// The device of each node of `graph` (see the module doc), given the layer `bounds`.
fn node_stages(graph: &Graph, weight_layer: &HashMap<WeightId, usize>, bounds: &[usize]) -> Vec<usize> {
    let stage_of_layer = |l: usize| stage_of(bounds, l);
    let mut stages: Vec<usize> = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let from_inputs = node.op.inputs().iter().map(|t| stages[t.0 as usize]).max().unwrap_or(0);
        let weight = match &node.op {
            Op::Linear { weight, .. } => Some(*weight),
            Op::Embed { table } | Op::MixEmbed { table } => Some(*table),
            Op::Moe { params, .. } => Some(params.down),
            Op::DeltaNet { params, .. } => Some(params.decay),
            Op::Conv1d { params, .. } => Some(params.weight),
            _ => None,
        };
        let from_weight = weight.and_then(|w| weight_layer.get(&w)).map_or(0, |&l| stage_of_layer(l));
        let from_label = node.label.as_deref().and_then(layer_of).map_or(0, stage_of_layer);
        stages.push(from_inputs.max(from_weight).max(from_label));
    }
    stages
}

/// Where each KV layer and each recurrent state layer of a model lives: its device and its
/// index among that device's layers.
#[derive(Debug, Clone, Default, PartialEq)]
struct MemoryMap {
    kv: Vec<Option<(usize, u32)>>,
    states: Vec<Option<(usize, u32)>>,
}

impl MemoryMap {
    /// The map of a graph whose nodes run on `stages` (the attention or recurrent node that
    /// writes a layer decides its device; a node reading another device's layer is refused).
    fn of(graph: &Graph, stages: &[usize], n_stages: usize) -> Result<Self, String> {
        let mut kv_stage: HashMap<u32, usize> = HashMap::new();
        let mut state_stage: HashMap<u32, usize> = HashMap::new();
        let mut readers: Vec<(u32, usize)> = Vec::new();
        for (node, &s) in graph.nodes.iter().zip(stages) {
            match &node.op {
                Op::Attention { params, .. } if params.write_kv => {
                    kv_stage.insert(params.kv_layer, s);
                }
                Op::Attention { params, .. } => readers.push((params.kv_layer, s)),
                Op::Conv1d { params, .. } => {
                    state_stage.insert(params.state, s);
                }
                Op::DeltaNet { params, .. } => {
                    state_stage.insert(params.state, s);
                }
                _ => {}
            }
        }
        for (layer, s) in readers {
            match kv_stage.get(&layer) {
                Some(&w) if w != s => {
                    return Err(format!(
                        "a layer on device {s} of the pipeline reads KV cache layer {layer} on device {w}: \
                         KV-sharing layers must stay on the device of the layer they read"
                    ))
                }
                Some(_) => {}
                None => {
                    kv_stage.insert(layer, s);
                }
            }
        }
        let number = |of: &HashMap<u32, usize>| -> Vec<Option<(usize, u32)>> {
            let n = of.keys().max().map_or(0, |&m| m as usize + 1);
            let mut count = vec![0u32; n_stages];
            (0..n as u32)
                .map(|l| {
                    of.get(&l).map(|&s| {
                        count[s] += 1;
                        (s, count[s] - 1)
                    })
                })
                .collect()
        };
        Ok(Self { kv: number(&kv_stage), states: number(&state_stage) })
    }
}

/// One device's piece of a step graph: its graph (KV and state layers renumbered for the
/// device) and whether it starts with the previous piece's hand-on.
#[derive(Debug, Clone)]
struct Piece {
    stage: usize,
    graph: Graph,
}

/// Cut `graph` into one piece per device in order (see the module doc).
fn split_graph(graph: &Graph, stages: &[usize], map: &MemoryMap, n_stages: usize) -> Result<Vec<Piece>, String> {
    let out = graph.output().0 as usize;
    if stages[out] != n_stages - 1 {
        return Err(format!("the graph's output runs on device {} of {n_stages}, not the last", stages[out]));
    }
    let mut pieces = Vec::with_capacity(n_stages);
    // The tensor piece `s` hands on, found when cutting piece `s + 1`.
    let mut hand_on: Vec<Option<TensorId>> = vec![None; n_stages];
    let mut bodies: Vec<Vec<usize>> = vec![Vec::new(); n_stages];
    for (i, &s) in stages.iter().enumerate() {
        bodies[s].push(i);
    }
    for s in 1..n_stages {
        let mut crossing: Vec<TensorId> =
            bodies[s].iter().flat_map(|&i| graph.nodes[i].op.inputs()).filter(|t| stages[t.0 as usize] < s).collect();
        crossing.sort();
        crossing.dedup();
        match crossing.as_slice() {
            [t] if stages[t.0 as usize] == s - 1 => hand_on[s - 1] = Some(*t),
            [t] => {
                return Err(format!(
                    "device {s} of the pipeline reads a tensor of device {}, past the one between them",
                    stages[t.0 as usize]
                ))
            }
            [] => return Err(format!("device {s} of the pipeline reads nothing from the one before it")),
            many => {
                return Err(format!(
                    "the cut before device {s} of the pipeline carries {} tensors ({}); one is supported",
                    many.len(),
                    many.iter().map(|t| graph.node(*t).op.name()).collect::<Vec<_>>().join(", ")
                ))
            }
        }
    }
    for (s, body) in bodies.iter().enumerate() {
        let mut nodes: Vec<Node> = Vec::with_capacity(body.len() + 2);
        let mut new_id: HashMap<TensorId, TensorId> = HashMap::new();
        if s > 0 {
            let t = hand_on[s - 1].expect("found above");
            let src = graph.node(t);
            nodes.push(Node { op: Op::Input, shape: src.shape, dtype: src.dtype, label: src.label.clone() });
            new_id.insert(t, TensorId(0));
        }
        for &i in body {
            let mut node = graph.nodes[i].clone();
            node.op.map_inputs(|t| new_id[&t]);
            relabel_memory(&mut node.op, map)?;
            new_id.insert(TensorId(i as u32), TensorId(nodes.len() as u32));
            nodes.push(node);
        }
        // The piece ends with what it hands on (a copy where that is not its last node).
        if let Some(t) = hand_on[s] {
            let last = TensorId(nodes.len() as u32 - 1);
            let mine = new_id[&t];
            if mine != last {
                let src = nodes[mine.0 as usize].clone();
                nodes.push(Node { op: Op::Scale { x: mine, s: 1.0 }, ..src });
            }
        }
        pieces.push(Piece { stage: s, graph: Graph { nodes, n_tokens: graph.n_tokens, n_outputs: graph.n_outputs } });
    }
    Ok(pieces)
}

/// Renumber the KV or state layer an op names to its index on its device.
fn relabel_memory(op: &mut Op, map: &MemoryMap) -> Result<(), String> {
    let local = |of: &[Option<(usize, u32)>], l: u32, what: &str| {
        of.get(l as usize).copied().flatten().map(|(_, i)| i).ok_or_else(|| format!("{what} layer {l} has no device"))
    };
    match op {
        Op::Attention { params, .. } => params.kv_layer = local(&map.kv, params.kv_layer, "KV")?,
        Op::Conv1d { params, .. } => params.state = local(&map.states, params.state, "state")?,
        Op::DeltaNet { params, .. } => params.state = local(&map.states, params.state, "state")?,
        _ => {}
    }
    Ok(())
}

/// Whether every one of `devices` runs `node` (each may be given any layer), naming the
/// first that cannot.
pub(crate) fn all_support(devices: &[Box<dyn Backend>], node: &Node) -> Result<(), String> {
    devices.iter().try_for_each(|b| b.supports(node).map_err(|why| format!("{}: {why}", b.device().id)))
}

/// Several backends running one model as a pipeline of layer runs (see the module doc).
pub struct PipelineBackend {
    stages: Vec<Box<dyn Backend>>,
    info: DeviceInfo,
    /// The first layer of each device, and the layer count at the end.
    bounds: Vec<usize>,
    weight_layer: HashMap<WeightId, usize>,
    map: MemoryMap,
    /// Each plan's pieces: (device, its plan there).
    plans: Vec<Vec<(usize, PlanId)>>,
    /// Bytes of the weights every device holds (embeddings, output, shared factors).
    replicated: u64,
}

impl PipelineBackend {
    /// A pipeline of `stages` (at least two) over `model`'s layers, weighed by `shares`
    /// (empty = even). Checks up front that the model's graph cuts cleanly.
    pub fn new(stages: Vec<Box<dyn Backend>>, model: &Model, shares: &[f64]) -> Result<Self, EngineError> {
        if model.diffusion().is_some() {
            return Err(EngineError::Invalid("diffusion models do not run in a pipeline of devices yet".into()));
        }
        let n_layer = model.info.n_layer;
        let bounds = layer_bounds(n_layer, stages.len(), shares)?;
        let weight_layer: HashMap<WeightId, usize> =
            model.weights.iter().filter_map(|(id, name)| layer_of(name).map(|l| (id, l))).collect();
        let probe = model.graph(1, 1);
        let n = stages.len();
        let node_stage = node_stages(&probe, &weight_layer, &bounds);
        let refuse = |why: String| EngineError::Invalid(format!("the model does not split across devices: {why}"));
        let map = MemoryMap::of(&probe, &node_stage, n).map_err(refuse)?;
        split_graph(&probe, &node_stage, &map, n).map_err(refuse)?;
        let ids: Vec<String> = stages.iter().map(|b| b.device().id.clone()).collect();
        let mut features = Vec::new();
        for (s, b) in stages.iter().enumerate() {
            features.push(format!(
                "pipeline: layers {}..{} on {} ({})",
                bounds[s],
                bounds[s + 1],
                ids[s],
                b.device().name
            ));
        }
        let info = DeviceInfo {
            id: ids.join("+"),
            name: format!("pipeline of {} devices", stages.len()),
            memory_bytes: stages.iter().map(|b| b.device().memory_bytes).sum(),
            features,
        };
        for (s, id) in ids.iter().enumerate() {
            tracing::info!("pipeline: layers {}..{} on {id}", bounds[s], bounds[s + 1]);
        }
        let replicated = model
            .weights
            .iter()
            .filter(|(id, _)| !weight_layer.contains_key(id))
            .map(|(id, _)| model.weights.info(id).bytes())
            .sum();
        Ok(Self { stages, info, bounds, weight_layer, map, plans: Vec::new(), replicated })
    }

    /// The first layer of each device and the layer count at the end.
    pub fn bounds(&self) -> &[usize] {
        &self.bounds
    }

    /// The devices that hold a weight: its layer's, or every one for the model's other
    /// weights (embeddings, output, shared RoPE factors).
    fn holders(&self, id: WeightId, name: &str) -> Vec<usize> {
        match self.weight_layer.get(&id).copied().or_else(|| layer_of(name)) {
            Some(l) => vec![stage_of(&self.bounds, l)],
            None => (0..self.stages.len()).collect(),
        }
    }

    fn pieces(&self, plan: PlanId) -> Result<&[(usize, PlanId)], BackendError> {
        self.plans
            .get(plan.0 as usize)
            .map(Vec::as_slice)
            .ok_or_else(|| BackendError::InvalidInput(format!("no plan {}", plan.0)))
    }

    /// Run every piece but the last, each on the previous one's hand-on; returns the last
    /// piece and the activations it takes.
    fn run_front(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
    ) -> Result<((usize, PlanId), Vec<f32>), BackendError> {
        let pieces = self.pieces(plan)?.to_vec();
        let (last, front) = pieces.split_last().expect("a pipeline plan has pieces");
        let mut hidden = Vec::new();
        for &(s, p) in front {
            let inp = StepInputs { hidden: &hidden, ..*inputs };
            hidden = self.stages[s].execute(p, &inp)?;
        }
        Ok((*last, hidden))
    }
}

impl Backend for PipelineBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn supports(&self, node: &Node) -> Result<(), String> {
        all_support(&self.stages, node)
    }

    /// The tightest of the devices' output limits: any of them may produce the logits.
    fn max_output_bytes(&self) -> Option<u64> {
        self.stages.iter().filter_map(|b| b.max_output_bytes()).min()
    }

    /// What the whole model may take so that every device fits its part: per device (stages
    /// with the same id share one device, as `Vulkan0,Vulkan0` or `cpu,cpu` do), its free
    /// memory less its copies of the replicated weights, over its share of the layers (a
    /// layer's weights and KV go where the layer is); the tightest device decides.
    fn memory_available(&self) -> Option<u64> {
        let n_layer = *self.bounds.last().expect("bounds") as f64;
        let mut devices: HashMap<&str, (u64, f64, u64)> = HashMap::new();
        for (s, b) in self.stages.iter().enumerate() {
            let avail = b.memory_available()?;
            let e = devices.entry(b.device().id.as_str()).or_insert((avail, 0.0, 0));
            e.0 = e.0.min(avail);
            e.1 += (self.bounds[s + 1] - self.bounds[s]) as f64 / n_layer;
            e.2 += 1;
        }
        let per_layer = devices
            .values()
            .map(|&(avail, share, copies)| avail.saturating_sub(copies * self.replicated) as f64 / share)
            .fold(f64::INFINITY, f64::min);
        Some((per_layer as u64).saturating_add(self.replicated))
    }

    fn load_weight(&mut self, id: WeightId, weight: &WeightData) -> Result<(), BackendError> {
        self.load_weight_placed(id, weight, WeightPlace::Device)
    }

    fn load_weight_placed(
        &mut self,
        id: WeightId,
        weight: &WeightData,
        place: WeightPlace,
    ) -> Result<(), BackendError> {
        for s in self.holders(id, &weight.name) {
            self.stages[s].load_weight_placed(id, weight, place)?;
        }
        Ok(())
    }

    fn init_kv(&mut self, spec: &KvSpec) -> Result<(), BackendError> {
        for s in 0..self.stages.len() {
            let mine =
                |of: &[Option<(usize, u32)>], i: usize| of.get(i).copied().flatten().is_some_and(|(d, _)| d == s);
            let sub = KvSpec {
                layers: spec
                    .layers
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mine(&self.map.kv, *i))
                    .map(|(_, l)| *l)
                    .collect(),
                states: spec
                    .states
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mine(&self.map.states, *i))
                    .map(|(_, l)| *l)
                    .collect(),
                ..spec.clone()
            };
            self.stages[s].init_kv(&sub)?;
        }
        Ok(())
    }

    fn compile(&mut self, graph: &Graph) -> Result<PlanId, BackendError> {
        let n = self.stages.len();
        let stages = node_stages(graph, &self.weight_layer, &self.bounds);
        let bad = |why: String| BackendError::Unsupported { backend: self.info.id.clone(), what: why };
        let map = MemoryMap::of(graph, &stages, n).map_err(bad)?;
        if map.kv.iter().zip(&self.map.kv).any(|(a, b)| a.is_some() && a != b)
            || map.states.iter().zip(&self.map.states).any(|(a, b)| a.is_some() && a != b)
        {
            return Err(bad(
                "this step places the KV or state layers on other devices than the model's first step".into()
            ));
        }
        let pieces = split_graph(graph, &stages, &self.map, n).map_err(bad)?;
        let mut plan = Vec::with_capacity(pieces.len());
        for piece in pieces {
            plan.push((piece.stage, self.stages[piece.stage].compile(&piece.graph)?));
        }
        self.plans.push(plan);
        Ok(PlanId(self.plans.len() as u32 - 1))
    }

    fn execute(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<Vec<f32>, BackendError> {
        let ((s, p), hidden) = self.run_front(plan, inputs)?;
        self.stages[s].execute(p, &StepInputs { hidden: &hidden, ..*inputs })
    }

    fn execute_top_k(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
        k: usize,
        adjust: &[Vec<LogitAdjust>],
    ) -> Result<Vec<Vec<(u32, f32)>>, BackendError> {
        let ((s, p), hidden) = self.run_front(plan, inputs)?;
        self.stages[s].execute_top_k(p, &StepInputs { hidden: &hidden, ..*inputs }, k, adjust)
    }

    fn prepare_top_k(&mut self, plan: PlanId, k: usize) -> Result<(), BackendError> {
        let &(s, p) = self.pieces(plan)?.last().expect("a pipeline plan has pieces");
        self.stages[s].prepare_top_k(p, k)
    }

    fn copy_kv_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        self.stages.iter_mut().try_for_each(|b| b.copy_kv_pages(pairs))
    }

    fn copy_state(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        for (s, b) in self.stages.iter_mut().enumerate() {
            if self.map.states.iter().flatten().any(|&(d, _)| d == s) {
                b.copy_state(pairs)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_split_by_share_with_one_at_least_each() {
        assert_eq!(layer_bounds(8, 2, &[]).unwrap(), vec![0, 4, 8]);
        assert_eq!(layer_bounds(8, 2, &[3.0, 1.0]).unwrap(), vec![0, 6, 8]);
        assert_eq!(layer_bounds(3, 3, &[]).unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(layer_bounds(4, 2, &[100.0, 1.0]).unwrap(), vec![0, 3, 4]);
        assert_eq!(layer_bounds(4, 2, &[1.0, 100.0]).unwrap(), vec![0, 1, 4]);
        assert!(layer_bounds(1, 2, &[]).is_err());
        assert!(layer_bounds(8, 1, &[]).is_err());
        assert!(layer_bounds(8, 2, &[1.0]).is_err());
        assert!(layer_bounds(8, 2, &[1.0, 0.0]).is_err());
        assert_eq!(parse_split("3, 1").unwrap(), vec![3.0, 1.0]);
        assert!(parse_split("").unwrap().is_empty());
        assert!(parse_split("a,1").is_err());
    }
}
