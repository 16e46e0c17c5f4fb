//! A compiled CPU plan: the validated graph plus buffer lifetimes, interpreted node by node.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use infr_core::{BackendError, Graph, Op, OpLabel, Profile, StepInputs, WeightId};

use crate::backend::CpuWeight;
use crate::kv::KvCache;
use crate::matmul::{self, act_type_for, KernelTier};
use crate::ops::{attention, elementwise, moe, norm, recurrent, rope};

/// A graph checked against the loaded weights.
pub(crate) struct Plan {
    graph: Graph,
    last_use: Vec<usize>,
    /// The f32 taps of each convolution weight, read once here rather than every step.
    taps: HashMap<WeightId, Vec<f32>>,
}

fn missing(id: WeightId) -> BackendError {
    BackendError::InvalidInput(format!("weight {} is not loaded", id.0))
}

impl Plan {
    pub(crate) fn compile(graph: &Graph, weights: &HashMap<WeightId, CpuWeight>) -> Result<Self, BackendError> {
        let need_vec = |id: WeightId, len: usize| -> Result<(), BackendError> {
            let w = weights.get(&id).ok_or_else(|| missing(id))?;
            match &w.f32 {
                Some(v) if v.len() == len => Ok(()),
                _ => Err(BackendError::InvalidInput(format!("weight {} is not a vector of {len}", id.0))),
            }
        };
        for node in &graph.nodes {
            infr_core::f32_outputs_only(node)
                .map_err(|what| BackendError::Unsupported { backend: "cpu".into(), what })?;
            match &node.op {
                Op::Embed { table } => {
                    let w = weights.get(table).ok_or_else(|| missing(*table))?;
                    if w.cols != node.cols() {
                        return Err(BackendError::InvalidInput("embedding width mismatch".into()));
                    }
                }
                Op::Linear { x, weight, bias } => {
                    let w = weights.get(weight).ok_or_else(|| missing(*weight))?;
                    let k = graph.node(*x).cols();
                    if w.cols != k || w.rows != node.cols() {
                        return Err(BackendError::InvalidInput(format!("linear weight {} has wrong shape", weight.0)));
                    }
                    if act_type_for(w.ty).row_bytes(k).is_none() {
                        return Err(BackendError::Unsupported {
                            backend: "cpu".into(),
                            what: format!("{} matmul with {k} columns", w.ty),
                        });
                    }
                    if let Some(b) = bias {
                        need_vec(*b, node.cols())?;
                    }
                }
                Op::RmsNorm { weight: Some(w), group, .. } => need_vec(*w, *group as usize)?,
                Op::Attention { params: ap, .. } => {
                    if let Some(s) = ap.sinks {
                        need_vec(s, ap.n_head as usize)?;
                    }
                }
                Op::Rope { params, .. } => {
                    if let Some(f) = params.freq_factors {
                        need_vec(f, params.n_rot as usize / 2)?;
                    }
                }
                Op::Moe { x, params: p, .. } => {
                    let cols = graph.node(*x).cols();
                    for id in crate::backend::moe_matrices(p) {
                        let w = weights.get(&id).ok_or_else(|| missing(id))?;
                        let k = w.cols;
                        if act_type_for(w.ty).row_bytes(k).is_none() {
                            return Err(BackendError::Unsupported {
                                backend: "cpu".into(),
                                what: format!("{} expert matmul with {k} columns", w.ty),
                            });
                        }
                    }
                    let held = p.held_experts().1 as usize;
                    let is_experts = |id: &WeightId| weights.get(id).is_some_and(|w| w.experts.len() == held);
                    let ok = match p.gate_up {
                        infr_core::ExpertGateUp::Separate { gate, up } => is_experts(&gate) && is_experts(&up),
                        infr_core::ExpertGateUp::Fused(gu) => is_experts(&gu),
                    };
                    if !ok || !is_experts(&p.down) {
                        return Err(BackendError::InvalidInput(format!("moe: expert weights are not {held} experts")));
                    }
                    if let Some(s) = p.expert_scale {
                        need_vec(s, p.n_expert as usize)?;
                    }
                    if let Some(gi) = p.shared.and_then(|s| s.gate_inp) {
                        need_vec(gi, cols)?;
                    }
                }
                Op::Conv1d { x, params } => {
                    let w = weights.get(&params.weight).ok_or_else(|| missing(params.weight))?;
                    if w.ty != infr_quant::GgmlType::F32 || w.rows != graph.node(*x).cols() {
                        return Err(BackendError::InvalidInput("conv1d weight must be f32 {kernel, channels}".into()));
                    }
                }
                Op::DeltaNet { params, .. } => need_vec(params.decay, params.n_v_head as usize)?,
                _ => {}
            }
        }
        let mut taps = HashMap::new();
        for node in &graph.nodes {
            if let Op::Conv1d { params, .. } = &node.op {
                let cw = &weights[&params.weight];
                let mut t = vec![0f32; cw.rows * cw.cols];
                infr_quant::dequantize(cw.ty, &cw.bytes, &mut t)
                    .map_err(|e| BackendError::InvalidInput(e.to_string()))?;
                taps.insert(params.weight, t);
            }
        }
        Ok(Self { graph: graph.clone(), last_use: graph.last_uses(), taps })
    }

    pub(crate) fn execute(
        &self,
        weights: &HashMap<WeightId, CpuWeight>,
        kv: &mut KvCache,
        tier: KernelTier,
        inp: &StepInputs<'_>,
        prof: Option<&Mutex<Profile>>,
    ) -> Result<Vec<f32>, BackendError> {
        let mut times: Vec<f64> = Vec::new();
        let g = &self.graph;
        inp.validate(g.n_tokens, g.n_outputs, &kv.spec)?;
        let page_size = kv.page_size as usize;
        let mut bufs: Vec<Option<Vec<f32>>> = vec![None; g.nodes.len()];
        let w = |id: &WeightId| &weights[id];
        let vec_of = |id: &WeightId| weights[id].f32.as_deref().expect("vector weight checked at compile");
        let mut act_cache: ActCache = Vec::new();
        // Outputs (and profile nanoseconds) of matmuls computed with an earlier one of their run.
        let mut ahead: HashMap<usize, (Vec<f32>, f64)> = HashMap::new();
        for (i, node) in g.nodes.iter().enumerate() {
            let t0 = prof.map(|_| Instant::now());
            let mut time_override: Option<f64> = None;
            // Take an input's buffer if this node is its last reader, else copy it.
            let take = |t: infr_core::TensorId, bufs: &mut Vec<Option<Vec<f32>>>| -> Vec<f32> {
                let ti = t.0 as usize;
                if self.last_use[ti] == i {
                    bufs[ti].take().expect("buffer alive")
                } else {
                    bufs[ti].clone().expect("buffer alive")
                }
            };
            let out = match &node.op {
                Op::Linear { x, .. } => match ahead.remove(&i) {
                    // Computed with the first matmul of its run.
                    Some((out, t)) => {
                        time_override = Some(t);
                        out
                    }
                    None => {
                        let (first, t, rest) = self.matmul_run(i, *x, weights, tier, &bufs, &mut act_cache);
                        time_override = Some(t);
                        ahead.extend(rest);
                        first
                    }
                },
                Op::Embed { table } => embed(w(table), inp.tokens)?,
                Op::MixEmbed { table } => mix_embed(w(table), inp.embed_mix, g.n_tokens)?,
                Op::Input => {
                    if inp.hidden.len() != node.shape.elements() {
                        return Err(BackendError::InvalidInput(format!(
                            "the step hands in {} activations, the graph's input takes {}",
                            inp.hidden.len(),
                            node.shape.elements()
                        )));
                    }
                    inp.hidden.to_vec()
                }
                Op::RmsNorm { x, weight, eps, group } => {
                    let mut v = take(*x, &mut bufs);
                    norm::rms_norm(&mut v, *group as usize, *eps, weight.as_ref().map(vec_of));
                    v
                }
                Op::Rope { x, params } => {
                    let mut v = take(*x, &mut bufs);
                    rope::rope(&mut v, node.cols(), inp.positions, params, params.freq_factors.as_ref().map(vec_of));
                    v
                }
                Op::Attention { q, k, v, params } => {
                    let layer = kv
                        .layers
                        .get_mut(params.kv_layer as usize)
                        .ok_or_else(|| BackendError::InvalidInput(format!("no KV layer {}", params.kv_layer)))?;
                    if params.write_kv {
                        let kb = bufs[k.0 as usize].as_deref().expect("buffer alive");
                        let vb = bufs[v.0 as usize].as_deref().expect("buffer alive");
                        attention::write_kv(layer, kb, vb, inp, page_size);
                    }
                    let qb = bufs[q.0 as usize].as_deref().expect("buffer alive");
                    attention::attention(layer, qb, inp, params, params.sinks.as_ref().map(vec_of), page_size)
                }
                Op::Add { a, b } => {
                    let mut v = take(*a, &mut bufs);
                    let bb = bufs[b.0 as usize].as_deref().expect("buffer alive");
                    v.iter_mut().zip(bb).for_each(|(x, y)| *x += y);
                    v
                }
                Op::Mul { a, b } => {
                    let mut v = take(*a, &mut bufs);
                    let bb = bufs[b.0 as usize].as_deref().expect("buffer alive");
                    v.iter_mut().zip(bb).for_each(|(x, y)| *x *= y);
                    v
                }
                Op::Scale { x, s } => {
                    let mut v = take(*x, &mut bufs);
                    v.iter_mut().for_each(|x| *x *= s);
                    v
                }
                Op::TempScale { x, params } => {
                    let mut v = take(*x, &mut bufs);
                    for (row, &pos) in v.chunks_mut(node.cols()).zip(inp.positions) {
                        let f = params.factor(pos);
                        row.iter_mut().for_each(|x| *x *= f);
                    }
                    v
                }
                Op::Glu { gate, up, act } => {
                    let mut v = take(*gate, &mut bufs);
                    let ub = bufs[up.0 as usize].as_deref().expect("buffer alive");
                    elementwise::glu(&mut v, ub, *act);
                    v
                }
                Op::Softcap { x, cap } => {
                    let mut v = take(*x, &mut bufs);
                    elementwise::softcap(&mut v, *cap);
                    v
                }
                Op::Moe { x, logits, params } => {
                    let xb = bufs[x.0 as usize].as_deref().expect("buffer alive");
                    let lb = bufs[logits.0 as usize].as_deref().expect("buffer alive");
                    moe::moe(weights, tier, xb, lb, params, node.cols())?
                }
                Op::SliceCols { x, period, offset, len } => {
                    let xb = bufs[x.0 as usize].as_deref().expect("buffer alive");
                    elementwise::slice_cols(xb, *period as usize, *offset as usize, *len as usize)
                }
                Op::Conv1d { x, params } => {
                    let xb = bufs[x.0 as usize].as_deref().expect("buffer alive");
                    recurrent::conv1d(&mut kv.state, xb, &self.taps[&params.weight], node.cols(), params, inp)?
                }
                Op::DeltaNet { q, k, v, alpha, beta, params } => {
                    let b = |t: &infr_core::TensorId| bufs[t.0 as usize].as_deref().expect("buffer alive");
                    let d = recurrent::DeltaNetInputs {
                        q: b(q),
                        k: b(k),
                        v: b(v),
                        alpha: b(alpha),
                        beta: b(beta),
                        decay: vec_of(&params.decay),
                    };
                    recurrent::delta_net(&mut kv.state, &d, params, inp)?
                }
                Op::OutputRows { x } => {
                    let src = bufs[x.0 as usize].as_deref().expect("buffer alive");
                    let c = node.cols();
                    let mut out = Vec::with_capacity(inp.output_rows.len() * c);
                    for &r in inp.output_rows {
                        out.extend_from_slice(&src[r as usize * c..(r as usize + 1) * c]);
                    }
                    out
                }
            };
            if let Some(t0) = t0 {
                times.push(time_override.unwrap_or_else(|| t0.elapsed().as_nanos() as f64));
            }
            bufs[i] = Some(out);
            act_cache.retain(|((t, _, _), _)| self.last_use[t.0 as usize] > i);
            for t in node.op.inputs() {
                let ti = t.0 as usize;
                if self.last_use[ti] == i {
                    bufs[ti] = None;
                }
            }
        }
        if let Some(p) = prof {
            if let Ok(mut p) = p.lock() {
                p.add_submit(&self.labels(weights), &times, true);
            }
        }
        Ok(bufs.pop().flatten().expect("output buffer"))
    }

    /// Profile labels of the nodes: kernel `op.type` for matmuls and embeddings.
    fn labels(&self, weights: &HashMap<WeightId, CpuWeight>) -> Vec<OpLabel> {
        let g = &self.graph;
        g.nodes
            .iter()
            .map(|n| {
                let (kernel, shape) = match &n.op {
                    Op::Linear { x, weight, .. } => {
                        let w = &weights[weight];
                        (format!("linear.{}", w.ty), Some(format!("{}x{} n={}", g.node(*x).cols(), n.cols(), n.rows())))
                    }
                    Op::Embed { table } => (format!("embed.{}", weights[table].ty), None),
                    op => (op.name().to_owned(), None),
                };
                OpLabel { node: n.label.clone().unwrap_or_default(), kernel, shape }
            })
            .collect()
    }
}

/// Inputs prepared for the matmuls (quantized or rounded per activation type), kept while a
/// later matmul of the same input may need them.
type ActCache = Vec<((infr_core::TensorId, infr_quant::GgmlType, bool), std::sync::Arc<matmul::PreparedActs>)>;

impl Plan {
    /// The run of matmuls from node `i` that read the same input `x` (q/k/v, gate/up), as one
    /// parallel region: node `i`'s output and profile nanoseconds, and the others' outputs
    /// with theirs (the run's time split by weight bytes).
    #[allow(clippy::type_complexity)]
    fn matmul_run(
        &self,
        i: usize,
        x: infr_core::TensorId,
        weights: &HashMap<WeightId, CpuWeight>,
        tier: KernelTier,
        bufs: &[Option<Vec<f32>>],
        act_cache: &mut ActCache,
    ) -> (Vec<f32>, f64, Vec<(usize, (Vec<f32>, f64))>) {
        let g = &self.graph;
        let w = |id: &WeightId| &weights[id];
        let vec_of = |id: &WeightId| weights[id].f32.as_deref().expect("vector weight checked at compile");
        let run: Vec<usize> = (i..g.nodes.len())
            .take_while(|&j| matches!(&g.nodes[j].op, Op::Linear { x: xj, .. } if *xj == x))
            .collect();
        let t_run = Instant::now();
        let mut prepared = Vec::with_capacity(run.len());
        for &j in &run {
            let Op::Linear { weight, .. } = &g.nodes[j].op else { unreachable!("run of matmuls") };
            let wt = w(weight);
            // Each input is quantized once per activation type.
            let want_f32 = !matmul::uses_fast(tier, wt.ty);
            let key = (x, act_type_for(wt.ty), want_f32);
            let acts = match act_cache.iter().find(|(k, _)| *k == key) {
                Some((_, a)) => a.clone(),
                None => {
                    let xin = bufs[x.0 as usize].as_deref().expect("buffer alive");
                    let a = std::sync::Arc::new(matmul::prepare_acts(xin, wt.cols, wt.ty, want_f32));
                    act_cache.push((key, a.clone()));
                    a
                }
            };
            prepared.push(acts);
        }
        let mut outs: Vec<Vec<f32>> = run.iter().map(|&j| vec![0f32; g.nodes[j].rows() * g.nodes[j].cols()]).collect();
        let mut jobs: Vec<matmul::PackedJob<'_>> = run
            .iter()
            .zip(outs.iter_mut())
            .zip(&prepared)
            .map(|((&j, out), acts)| {
                let Op::Linear { weight, bias, .. } = &g.nodes[j].op else { unreachable!("run of matmuls") };
                matmul::PackedJob { w: w(weight), acts, out, bias: bias.as_ref().map(vec_of) }
            })
            .collect();
        matmul::linear_many(tier, g.nodes[i].rows(), &mut jobs);
        let bytes: Vec<f64> = jobs.iter().map(|j| (j.w.rows * j.w.row_bytes) as f64).collect();
        drop(jobs);
        let total = t_run.elapsed().as_nanos() as f64;
        let sum: f64 = bytes.iter().sum::<f64>().max(1.0);
        let mut outs = outs.into_iter();
        let first = outs.next().expect("a run holds this node");
        let rest =
            run[1..].iter().zip(outs).zip(&bytes[1..]).map(|((&j, out), b)| (j, (out, total * b / sum))).collect();
        (first, total * bytes[0] / sum, rest)
    }
}

/// The rows of `table` for `tokens` (an id past the table is an input error).
/// `Op::MixEmbed`: each row the `mix`-weighted sum of the table's rows (zeros without a mix).
/// Every table row is dequantized once and added into each output row; threads take slices
/// of the vocabulary and their partial sums are added up.
fn mix_embed(tw: &CpuWeight, mix: &[f32], n_tokens: usize) -> Result<Vec<f32>, BackendError> {
    use rayon::prelude::*;
    let (n_vocab, dim) = (tw.rows, tw.cols);
    if mix.is_empty() {
        return Ok(vec![0f32; n_tokens * dim]);
    }
    if mix.len() != n_tokens * n_vocab {
        return Err(BackendError::InvalidInput(format!(
            "embedding mixture has {} values, expected {n_tokens} rows of {n_vocab}",
            mix.len()
        )));
    }
    const SLICE: usize = 256;
    let partial = (0..n_vocab.div_ceil(SLICE))
        .into_par_iter()
        .map(|c| -> Result<Vec<f32>, BackendError> {
            let mut acc = vec![0f32; n_tokens * dim];
            let mut row = vec![0f32; dim];
            for v in c * SLICE..((c + 1) * SLICE).min(n_vocab) {
                let bytes = &tw.bytes[v * tw.row_bytes..(v + 1) * tw.row_bytes];
                infr_quant::dequantize(tw.ty, bytes, &mut row)
                    .map_err(|e| BackendError::InvalidInput(e.to_string()))?;
                for (r, out) in acc.chunks_mut(dim).enumerate() {
                    let p = mix[r * n_vocab + v];
                    if p != 0.0 {
                        crate::simd::vecf::axpy(out, p, &row);
                    }
                }
            }
            Ok(acc)
        })
        .try_reduce(
            || vec![0f32; n_tokens * dim],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                Ok(a)
            },
        )?;
    Ok(partial)
}

fn embed(tw: &CpuWeight, tokens: &[u32]) -> Result<Vec<f32>, BackendError> {
    let mut out = vec![0f32; tokens.len() * tw.cols];
    for (r, &tok) in tokens.iter().enumerate() {
        let tok = tok as usize;
        if tok >= tw.rows {
            return Err(BackendError::InvalidInput(format!("token id {tok} >= vocabulary size {}", tw.rows)));
        }
        let bytes = &tw.bytes[tok * tw.row_bytes..(tok + 1) * tw.row_bytes];
        infr_quant::dequantize(tw.ty, bytes, &mut out[r * tw.cols..(r + 1) * tw.cols])
            .map_err(|e| BackendError::InvalidInput(e.to_string()))?;
    }
    Ok(out)
}
