//! One mixture-of-experts model across several devices, expert by expert
//! (`multi.expert_parallel`): every device holds the model's other weights, its KV cache and
//! recurrent state, and a slice of every MoE layer's experts (the expert dimension of the 3-D
//! tensors, an even share each). A step runs every layer on every device; after each MoE layer
//! the devices' partial outputs are summed through host memory (an all-reduce) and handed to
//! all of them for the next layer. Attention runs on every device (each keeps its own cache);
//! the experts, the bulk of such a model, are what the devices divide.
//!
//! The step graph is cut after each MoE layer's residual add: the first device computes
//! `h + moe_0` (with the shared expert), the others `moe_d` alone ([`MoeParams::expert_slice`]),
//! and the host adds them. A model whose MoE output is not added straight to the residual (as
//! Gemma 4's post-norms do) is refused up front, as is a model without MoE layers.

use std::collections::HashMap;

use infr_core::{
    Backend, BackendError, DeviceInfo, ExpertGateUp, Graph, KvSpec, LogitAdjust, MoeParams, Node, Op, PlanId,
    StepInputs, TensorId, WeightData, WeightId, WeightPlace,
};
use infr_models::Model;

use crate::EngineError;

/// The expert tensors of a MoE op (gate/up, down and their biases; not the per-expert scales,
/// which the router reads for every expert).
fn expert_tensors(p: &MoeParams) -> Vec<WeightId> {
    let mut v = match p.gate_up {
        ExpertGateUp::Separate { gate, up } => vec![gate, up],
        ExpertGateUp::Fused(gu) => vec![gu],
    };
    v.push(p.down);
    match p.gate_up_bias {
        Some(ExpertGateUp::Separate { gate, up }) => v.extend([gate, up]),
        Some(ExpertGateUp::Fused(gu)) => v.push(gu),
        None => {}
    }
    v.extend(p.down_bias);
    v
}

/// An even split of `n_expert` experts over `n` devices: `(first, count)` each.
pub fn expert_slices(n_expert: u32, n: usize) -> Result<Vec<(u32, u32)>, EngineError> {
    if n < 2 || n_expert < n as u32 {
        return Err(EngineError::Invalid(format!("{n_expert} experts do not split over {n} devices")));
    }
    let bound = |d: usize| (d as u64 * n_expert as u64 / n as u64) as u32;
    Ok((0..n).map(|d| (bound(d), bound(d + 1) - bound(d))).collect())
}

/// A graph cut into segments, each ending at a MoE layer's residual add (the last one at the
/// output): per segment, the graph each device runs (one graph, on the first device, for the
/// last segment).
fn split_graph(graph: &Graph, slices: &[(u32, u32)]) -> Result<Vec<Vec<Graph>>, String> {
    let n = graph.nodes.len();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        for t in node.op.inputs() {
            consumers[t.0 as usize].push(i);
        }
    }
    // Each MoE node and the residual add that is its only reader.
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if !matches!(node.op, Op::Moe { .. }) {
            continue;
        }
        match consumers[i].as_slice() {
            [a] if matches!(graph.nodes[*a].op, Op::Add { .. }) => cuts.push((i, *a)),
            _ => {
                return Err(format!(
                    "the output of MoE node {i} ({}) is not added straight to the residual",
                    node.label.as_deref().unwrap_or("?")
                ))
            }
        }
    }
    if cuts.is_empty() {
        return Err("the model has no mixture-of-experts layers".into());
    }
    let mut segments = Vec::with_capacity(cuts.len() + 1);
    // (first node, end, the segment's MoE node): up to each cut's add, then the rest.
    let mut ranges: Vec<(usize, usize, Option<usize>)> = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0usize;
    for &(m, a) in &cuts {
        ranges.push((start, a + 1, Some(m)));
        start = a + 1;
    }
    ranges.push((start, n, None));
    let mut hand_on: Option<TensorId> = None;
    for (from, to, moe) in ranges {
        if from >= to {
            return Err("a MoE layer's residual add is the graph's output".into());
        }
        let devices = if moe.is_some() { slices.len() } else { 1 };
        let mut per_device = Vec::with_capacity(devices);
        for (d, &slice) in slices.iter().enumerate().take(devices) {
            let mut nodes: Vec<Node> = Vec::with_capacity(to - from + 2);
            let mut new_id: HashMap<TensorId, TensorId> = HashMap::new();
            if let Some(t) = hand_on {
                let src = graph.node(t);
                nodes.push(Node { op: Op::Input, shape: src.shape, dtype: src.dtype, label: src.label.clone() });
                new_id.insert(t, TensorId(0));
            }
            for i in from..to {
                // The other devices hand on their experts' part alone.
                if d > 0 && Some(i) == to.checked_sub(1).filter(|_| moe.is_some()) {
                    continue;
                }
                let mut node = graph.nodes[i].clone();
                let mut outside = None;
                node.op.map_inputs(|t| {
                    new_id.get(&t).copied().unwrap_or_else(|| {
                        outside = Some(t);
                        t
                    })
                });
                if let Some(t) = outside {
                    return Err(format!(
                        "node {i} ({}) reads node {} across a MoE layer's all-reduce (only the residual crosses)",
                        node.op.name(),
                        t.0
                    ));
                }
                if let Op::Moe { params, .. } = &mut node.op {
                    params.expert_slice = Some(slice);
                    if d > 0 {
                        params.shared = None;
                    }
                }
                new_id.insert(TensorId(i as u32), TensorId(nodes.len() as u32));
                nodes.push(node);
            }
            if let (true, Some(m)) = (d > 0, moe) {
                // The MoE node's part is the output (a copy where it is not the last node).
                let mine = new_id[&TensorId(m as u32)];
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

/// Several backends running one MoE model with its experts divided among them (see the
/// module doc).
pub struct ExpertParallelBackend {
    devices: Vec<Box<dyn Backend>>,
    info: DeviceInfo,
    slices: Vec<(u32, u32)>,
    /// The expert tensors and each one's expert count (the slices cut them).
    experts: HashMap<WeightId, u32>,
    /// Each plan's segments: per segment, the plan of each device taking part.
    plans: Vec<Vec<Vec<PlanId>>>,
    /// Bytes of the model's expert tensors (all experts).
    expert_bytes: u64,
}

impl ExpertParallelBackend {
    /// `devices` (at least two) dividing `model`'s experts evenly. Checks up front that the
    /// model has MoE layers whose outputs are added straight to the residual.
    pub fn new(devices: Vec<Box<dyn Backend>>, model: &Model) -> Result<Self, EngineError> {
        let refuse =
            |why: String| EngineError::Invalid(format!("the model's experts do not split across devices: {why}"));
        if model.diffusion().is_some() {
            return Err(refuse("diffusion models do not run across devices yet".into()));
        }
        let probe = model.graph(1, 1);
        let mut experts = HashMap::new();
        let mut n_expert = None;
        for node in &probe.nodes {
            if let Op::Moe { params, .. } = &node.op {
                for id in expert_tensors(params) {
                    experts.insert(id, params.n_expert);
                }
                if n_expert.is_some_and(|n| n != params.n_expert) {
                    return Err(refuse("its MoE layers have different expert counts".into()));
                }
                n_expert = Some(params.n_expert);
            }
        }
        let n_expert = n_expert.ok_or_else(|| refuse("the model has no mixture-of-experts layers".into()))?;
        let slices = expert_slices(n_expert, devices.len())?;
        split_graph(&probe, &slices).map_err(refuse)?;
        let ids: Vec<String> = devices.iter().map(|b| b.device().id.clone()).collect();
        let features = slices
            .iter()
            .zip(&ids)
            .map(|(&(first, count), id)| format!("expert parallel: experts {first}..{} on {id}", first + count))
            .collect();
        for f in &features {
            tracing::info!("{f}");
        }
        let info = DeviceInfo {
            id: ids.join("+"),
            name: format!("experts over {} devices", devices.len()),
            memory_bytes: devices.iter().map(|b| b.device().memory_bytes).sum(),
            features,
        };
        let expert_bytes = model
            .weights
            .iter()
            .filter(|(id, _)| experts.contains_key(id))
            .map(|(id, _)| model.weights.info(id).bytes())
            .sum();
        Ok(Self { devices, info, slices, experts, plans: Vec::new(), expert_bytes })
    }

    /// Device `d`'s slice of an expert tensor of `n_expert` experts (the outermost dimension).
    fn slice_of(&self, weight: &WeightData, n_expert: u32, d: usize) -> Result<WeightData, BackendError> {
        let (first, count) = self.slices[d];
        let n = *weight.info.dims.last().unwrap_or(&0);
        if n != n_expert as usize || weight.bytes.len() % n != 0 {
            return Err(BackendError::InvalidInput(format!(
                "{}: not {n_expert} experts of equal size ({:?})",
                weight.name, weight.info.dims
            )));
        }
        let per = weight.bytes.len() / n;
        let mut dims = weight.info.dims.clone();
        *dims.last_mut().expect("checked above") = count as usize;
        let bytes = weight.bytes[first as usize * per..(first + count) as usize * per].to_vec();
        Ok(WeightData {
            name: weight.name.clone(),
            info: infr_core::WeightInfo { ty: weight.info.ty, dims },
            bytes: infr_core::TensorData::from_vec(bytes),
        })
    }

    /// Run every segment but the last (all devices, their outputs summed); returns the sum
    /// the last segment takes.
    fn run_front(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<(PlanId, Vec<f32>), BackendError> {
        let segments = self
            .plans
            .get(plan.0 as usize)
            .cloned()
            .ok_or_else(|| BackendError::InvalidInput(format!("no plan {}", plan.0)))?;
        let (last, front) = segments.split_last().expect("a plan has segments");
        let mut hidden: Vec<f32> = Vec::new();
        for seg in front {
            let mut sum: Vec<f32> = Vec::new();
            for (d, &p) in seg.iter().enumerate() {
                let out = self.devices[d].execute(p, &StepInputs { hidden: &hidden, ..*inputs })?;
                if d == 0 {
                    sum = out;
                } else {
                    sum.iter_mut().zip(&out).for_each(|(s, v)| *s += v);
                }
            }
            hidden = sum;
        }
        Ok((last[0], hidden))
    }
}

impl Backend for ExpertParallelBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn supports(&self, node: &Node) -> Result<(), String> {
        crate::pipeline::all_support(&self.devices, node)
    }

    /// What the whole model may take so that every device fits its part: each holds all of it
    /// but the experts outside its slices, so per device (stages with one id share it: `k` of
    /// them holding a share `c` of the experts) `k (X - E) + c E <= free`, with `E` the expert
    /// bytes; the tightest device decides.
    fn memory_available(&self) -> Option<u64> {
        let n_expert = self.slices.iter().map(|s| s.1 as u64).sum::<u64>().max(1) as f64;
        let mut devices: HashMap<&str, (u64, u64, f64)> = HashMap::new();
        for (b, &(_, count)) in self.devices.iter().zip(&self.slices) {
            let avail = b.memory_available()?;
            let e = devices.entry(b.device().id.as_str()).or_insert((avail, 0, 0.0));
            e.0 = e.0.min(avail);
            e.1 += 1;
            e.2 += count as f64 / n_expert;
        }
        let experts = self.expert_bytes as f64;
        devices
            .values()
            .map(|&(avail, copies, share)| ((avail as f64 - share * experts).max(0.0) / copies as f64 + experts) as u64)
            .min()
    }

    fn load_weight(&mut self, id: WeightId, weight: &WeightData) -> Result<(), BackendError> {
        self.load_weight_placed(id, weight, WeightPlace::Device)
    }

    fn load_weight_placed(&mut self, id: WeightId, weight: &WeightData, _: WeightPlace) -> Result<(), BackendError> {
        for d in 0..self.devices.len() {
            match self.experts.get(&id).copied() {
                Some(n_expert) => {
                    let part = self.slice_of(weight, n_expert, d)?;
                    self.devices[d].load_weight(id, &part)?;
                }
                None => self.devices[d].load_weight(id, weight)?,
            }
        }
        Ok(())
    }

    fn init_kv(&mut self, spec: &KvSpec) -> Result<(), BackendError> {
        self.devices.iter_mut().try_for_each(|b| b.init_kv(spec))
    }

    fn compile(&mut self, graph: &Graph) -> Result<PlanId, BackendError> {
        let segments = split_graph(graph, &self.slices)
            .map_err(|why| BackendError::Unsupported { backend: self.info.id.clone(), what: why })?;
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

    #[test]
    fn experts_split_evenly() {
        assert_eq!(expert_slices(8, 2).unwrap(), vec![(0, 4), (4, 4)]);
        assert_eq!(expert_slices(128, 3).unwrap(), vec![(0, 42), (42, 43), (85, 43)]);
        assert!(expert_slices(8, 1).is_err());
        assert!(expert_slices(2, 3).is_err());
    }
}
