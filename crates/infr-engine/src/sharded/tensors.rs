//! Tensor parallel: each attention block divided by KV-head groups and each gated FFN by its
//! hidden columns, Megatron-LM's split of a transformer block (Shoeybi et al., 2019, section
//! 3): the projections that fan out (Q/K/V, gate/up) keep the rows of the device's heads or
//! columns, the projection that comes back (attention output, down) the matching input
//! columns, so each device's output is a partial sum of the whole. MoE layers divide by
//! experts ([`super::experts`]).
//!
//! A block is divided only where the graph has the pattern: projections read by nothing else,
//! per-head ops between them and attention (RoPE, per-head norms, scales), the output
//! projection added straight to the residual, and cuts on the weights' quantization blocks.
//! Other blocks run whole on every device.

use std::collections::HashMap;

use infr_core::{Graph, Op, WeightId, WeightInfo};

use super::{consumers, even, residual_add, with_cols, Sharding, WeightCut};

/// Fewest columns a cut of a projection's input moves by (Vulkan reads float rows in fours
/// and its fast kernels want k in 32s; quantized weights cut on their blocks, 32 or 256).
const CUT_COLUMNS: usize = 32;

/// Facts about the graph that every block's check reads.
struct Ctx<'a> {
    graph: &'a Graph,
    consumers: Vec<Vec<usize>>,
    /// How many linear nodes read each weight (as its matrix or its bias).
    uses: HashMap<WeightId, usize>,
    infos: &'a HashMap<WeightId, WeightInfo>,
    n: usize,
}

/// A divided attention node: its KV layer, per device (KV heads, query heads), its node.
struct DividedAttention {
    kv_layer: u32,
    heads: Vec<(u32, u32)>,
    node: usize,
}

/// What one block's division adds to the sharding, gathered before any of it is recorded.
struct Plan {
    weights: Vec<(WeightId, WeightCut)>,
    /// Per device: (node, its new columns, drop its bias).
    nodes: Vec<Vec<(usize, usize, bool)>>,
    attention: Option<DividedAttention>,
    cut: (usize, usize),
}

impl Ctx<'_> {
    fn only_reader(&self, i: usize) -> Result<usize, String> {
        match self.consumers[i].as_slice() {
            [c] => Ok(*c),
            other => Err(format!("node {i} has {} readers", other.len())),
        }
    }

    /// The linear node's weight and bias, each read by no other node.
    fn own_linear(&self, i: usize) -> Result<(WeightId, Option<WeightId>), String> {
        let Op::Linear { weight, bias, .. } = self.graph.nodes[i].op else {
            return Err(format!("node {i} is {}, not a projection", self.graph.nodes[i].op.name()));
        };
        for w in std::iter::once(weight).chain(bias) {
            if self.uses.get(&w).copied().unwrap_or(0) != 1 {
                return Err(format!("weight {} is shared with another projection", w.0));
            }
        }
        Ok((weight, bias))
    }

    /// From `t` back to the projection that makes it through per-head ops of `head_dim`:
    /// the projection and the nodes on the way (the projection last), each read once.
    fn head_chain(&self, mut t: usize, head_dim: u32) -> Result<Vec<usize>, String> {
        let mut nodes = Vec::new();
        loop {
            self.only_reader(t)?;
            nodes.push(t);
            t = match &self.graph.nodes[t].op {
                Op::Linear { .. } => return Ok(nodes),
                Op::Rope { x, params } if params.head_dim == head_dim => x.0 as usize,
                Op::RmsNorm { x, group, .. } if *group == head_dim => x.0 as usize,
                Op::Scale { x, .. } | Op::TempScale { x, .. } => x.0 as usize,
                op => return Err(format!("{} between a projection and attention", op.name())),
            };
        }
    }

    /// The columns weight `w` is cut in: whole quantization blocks, and at least 32 (float
    /// weights too), the granularity the backends' kernels read rows in.
    fn cut_unit(&self, w: WeightId) -> Result<usize, String> {
        let info = self.infos.get(&w).ok_or_else(|| format!("weight {} is unknown", w.0))?;
        Ok(info.ty.info().block_size.max(CUT_COLUMNS))
    }

    /// Whether columns `parts` of weight `w` fall on its cut unit.
    fn aligned(&self, w: WeightId, parts: &[(usize, usize)]) -> Result<(), String> {
        let unit = self.cut_unit(w)?;
        match parts.iter().find(|&&(f, c)| f % unit != 0 || c % unit != 0) {
            Some(&(f, c)) => Err(format!("columns {f}..{} of a projection are not on its units of {unit}", f + c)),
            None => Ok(()),
        }
    }

    /// Attention node `a` by KV-head groups.
    fn attention(&self, a: usize) -> Result<Plan, String> {
        let Op::Attention { q, k, v, params: p } = &self.graph.nodes[a].op else {
            return Err("not attention".into());
        };
        let n = self.n;
        if (p.n_kv_head as usize) < n || p.n_kv_head == 0 || p.n_head % p.n_kv_head != 0 {
            return Err(format!(
                "{} query heads over {} KV heads do not divide among {n} devices",
                p.n_head, p.n_kv_head
            ));
        }
        let g = (p.n_head / p.n_kv_head) as usize;
        let (dk, dv) = (p.head_dim_k as usize, p.head_dim_v as usize);
        let kv = even(p.n_kv_head as usize, n);
        let chains = [
            (self.head_chain(q.0 as usize, p.head_dim_k)?, g * dk),
            (self.head_chain(k.0 as usize, p.head_dim_k)?, dk),
            (self.head_chain(v.0 as usize, p.head_dim_v)?, dv),
        ];
        let lin = |c: &Vec<usize>| *c.last().expect("a chain ends at its projection");
        if lin(&chains[0].0) == lin(&chains[1].0) || lin(&chains[1].0) == lin(&chains[2].0) {
            return Err("Q, K and V share a projection".into());
        }
        let o = self.only_reader(a)?;
        if !matches!(self.graph.nodes[o].op, Op::Linear { x, .. } if x.0 as usize == a) {
            return Err("the attention output is not projected".into());
        }
        let add =
            residual_add(self.graph, &self.consumers, o).ok_or("the output projection is not added to the residual")?;
        let (wo, _) = self.own_linear(o)?;
        let cols: Vec<(usize, usize)> = kv.iter().map(|&(f, c)| (f * g * dv, c * g * dv)).collect();
        self.aligned(wo, &cols)?;
        let mut weights = vec![(wo, WeightCut::Inner(cols.clone()))];
        let mut nodes: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new(); n];
        for (chain, per_kv_head) in &chains {
            let (w, b) = self.own_linear(lin(chain))?;
            let rows = WeightCut::Outer(kv.iter().map(|&(f, c)| (f * per_kv_head, c * per_kv_head)).collect());
            weights.push((w, rows.clone()));
            weights.extend(b.map(|b| (b, rows)));
            for (d, &(_, c)) in kv.iter().enumerate() {
                nodes[d].extend(chain.iter().map(|&i| (i, c * per_kv_head, false)));
            }
        }
        if let Some(s) = p.sinks {
            weights.push((s, WeightCut::Outer(kv.iter().map(|&(f, c)| (f * g, c * g)).collect())));
        }
        for (d, &(_, c)) in kv.iter().enumerate() {
            nodes[d].push((a, c * g * dv, false));
            nodes[d].push((o, self.graph.nodes[o].shape.cols(), d > 0));
        }
        let heads = kv.iter().map(|&(_, c)| (c as u32, (c * g) as u32)).collect();
        Ok(Plan {
            weights,
            nodes,
            attention: Some(DividedAttention { kv_layer: p.kv_layer, heads, node: a }),
            cut: (o, add),
        })
    }

    /// Gated FFN `down(act(gate x) * up x)` around GLU node `glu`, by hidden columns.
    fn ffn(&self, glu: usize) -> Result<Plan, String> {
        let Op::Glu { gate, up, .. } = self.graph.nodes[glu].op else {
            return Err("not a gated activation".into());
        };
        let (gate, up) = (gate.0 as usize, up.0 as usize);
        if gate == up {
            return Err("gate and up are one tensor".into());
        }
        let down = self.only_reader(glu)?;
        if !matches!(self.graph.nodes[down].op, Op::Linear { x, .. } if x.0 as usize == glu) {
            return Err("the gated activation is not projected".into());
        }
        let add = residual_add(self.graph, &self.consumers, down)
            .ok_or("the down projection is not added to the residual")?;
        let (wd, _) = self.own_linear(down)?;
        let n_ff = self.graph.nodes[glu].shape.cols();
        let block = self.cut_unit(wd)?;
        if n_ff % block != 0 || n_ff / block < self.n {
            return Err(format!("{n_ff} hidden columns in units of {block} do not divide among {} devices", self.n));
        }
        let parts: Vec<(usize, usize)> =
            even(n_ff / block, self.n).into_iter().map(|(f, c)| (f * block, c * block)).collect();
        self.aligned(wd, &parts)?;
        let mut weights = vec![(wd, WeightCut::Inner(parts.clone()))];
        for lin in [gate, up] {
            if self.only_reader(lin)? != glu {
                return Err("gate or up is read by another node".into());
            }
            let (w, b) = self.own_linear(lin)?;
            weights.push((w, WeightCut::Outer(parts.clone())));
            weights.extend(b.map(|b| (b, WeightCut::Outer(parts.clone()))));
        }
        let nodes = parts
            .iter()
            .enumerate()
            .map(|(d, &(_, c))| {
                vec![
                    (gate, c, false),
                    (up, c, false),
                    (glu, c, false),
                    (down, self.graph.nodes[down].shape.cols(), d > 0),
                ]
            })
            .collect();
        Ok(Plan { weights, nodes, attention: None, cut: (down, add) })
    }

    /// Record `plan` in `sh`; nothing is recorded if a weight conflicts.
    fn commit(&self, plan: Plan, sh: &mut Sharding) -> Result<(), String> {
        for (id, cut) in &plan.weights {
            if sh.weights.get(id).is_some_and(|old| old != cut) {
                return Err(format!("weight {} is read by two blocks cut differently", id.0));
            }
        }
        for (id, cut) in plan.weights {
            sh.cut_weight(id, cut)?;
        }
        for (d, nodes) in plan.nodes.into_iter().enumerate() {
            for (i, cols, drop_bias) in nodes {
                let mut node = with_cols(&self.graph.nodes[i], cols);
                if let (true, Op::Linear { bias, .. }) = (drop_bias, &mut node.op) {
                    // The bias joins the sum once, on the first device.
                    *bias = None;
                }
                sh.nodes[d].insert(i, node);
            }
        }
        if let Some(at) = plan.attention {
            for (d, (kv, q)) in at.heads.into_iter().enumerate() {
                if let Some(Op::Attention { params, .. }) = sh.nodes[d].get_mut(&at.node).map(|n| &mut n.op) {
                    params.n_kv_head = kv;
                    params.n_head = q;
                }
                sh.kv_heads[d].insert(at.kv_layer, kv);
            }
        }
        sh.cuts.push(plan.cut);
        Ok(())
    }
}

/// The tensor-parallel division of `graph` over `n` devices (see the module doc); an error
/// if nothing divides or a KV cache layer would be divided for some readers only.
pub(super) fn tensor_sharding(
    graph: &Graph,
    n: usize,
    infos: &HashMap<WeightId, WeightInfo>,
) -> Result<Sharding, String> {
    let mut uses: HashMap<WeightId, usize> = HashMap::new();
    for node in &graph.nodes {
        if let Op::Linear { weight, bias, .. } = node.op {
            for w in std::iter::once(weight).chain(bias) {
                *uses.entry(w).or_default() += 1;
            }
        }
    }
    let cx = Ctx { graph, consumers: consumers(graph), uses, infos, n };
    let mut sh = Sharding::new(n);
    let mut whole: Vec<String> = Vec::new();
    // KV layer → whether its attention nodes were divided.
    let mut kv_divided: HashMap<u32, bool> = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        let label = node.label.as_deref().unwrap_or("?");
        let done = match &node.op {
            Op::Attention { params, .. } => {
                let r = cx.attention(i).and_then(|plan| cx.commit(plan, &mut sh));
                if kv_divided.insert(params.kv_layer, r.is_ok()).is_some_and(|was| was != r.is_ok()) {
                    return Err(format!("KV cache layer {} is read by attention divided and whole", params.kv_layer));
                }
                r
            }
            Op::Glu { .. } => cx.ffn(i).and_then(|plan| cx.commit(plan, &mut sh)),
            Op::Moe { .. } => match residual_add(graph, &cx.consumers, i) {
                Some(add) => super::experts::split_experts(graph, i, add, &mut sh),
                None => Err("its output is not added straight to the residual".into()),
            },
            _ => continue,
        };
        if let Err(why) = done {
            whole.push(format!("{} {label}: {why}", node.op.name()));
        }
    }
    for w in &whole {
        tracing::debug!("tensor parallel: runs whole on every device: {w}");
    }
    if sh.cuts.is_empty() {
        return Err(format!("no attention, FFN or MoE block divides ({})", whole.join("; ")));
    }
    sh.cuts.sort_by_key(|&(_, add)| add);
    Ok(sh)
}
