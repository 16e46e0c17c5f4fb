//! Expert parallel: every MoE layer's experts divided evenly among the devices
//! ([`MoeParams::expert_slice`]); routing stays over all experts, the shared expert runs on
//! the first device only.

use infr_core::{ExpertGateUp, Graph, MoeParams, Op, WeightId};

use super::{consumers, residual_add, Sharding, WeightCut};
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
    Ok(super::even(n_expert as usize, n).into_iter().map(|(f, c)| (f as u32, c as u32)).collect())
}

/// Divide MoE node `m`, whose output the residual add `add` reads, by experts.
pub(super) fn split_experts(graph: &Graph, m: usize, add: usize, sh: &mut Sharding) -> Result<(), String> {
    let Op::Moe { params, .. } = &graph.nodes[m].op else {
        return Err(format!("node {m} is not a MoE op"));
    };
    let n = sh.devices();
    let slices = expert_slices(params.n_expert, n).map_err(|e| e.to_string())?;
    let cut = WeightCut::Outer(slices.iter().map(|&(f, c)| (f as usize, c as usize)).collect());
    let tensors = expert_tensors(params);
    // All or nothing: a MoE op left whole must not read a weight cut for another.
    if let Some(id) = tensors.iter().find(|id| sh.weights.get(id).is_some_and(|old| *old != cut)) {
        return Err(format!("weight {} is read by two blocks cut differently", id.0));
    }
    for id in tensors {
        sh.cut_weight(id, cut.clone())?;
    }
    for (d, &slice) in slices.iter().enumerate() {
        let mut node = graph.nodes[m].clone();
        if let Op::Moe { params, .. } = &mut node.op {
            params.expert_slice = Some(slice);
            if d > 0 {
                params.shared = None;
            }
        }
        sh.nodes[d].insert(m, node);
    }
    sh.cuts.push((m, add));
    Ok(())
}

/// The expert-parallel division of `graph` over `n` devices: every MoE layer by experts,
/// everything else whole on every device.
pub(super) fn expert_sharding(graph: &Graph, n: usize) -> Result<Sharding, String> {
    let consumers = consumers(graph);
    let mut sh = Sharding::new(n);
    for (i, node) in graph.nodes.iter().enumerate() {
        if !matches!(node.op, Op::Moe { .. }) {
            continue;
        }
        let add = residual_add(graph, &consumers, i).ok_or_else(|| {
            format!(
                "the output of MoE node {i} ({}) is not added straight to the residual",
                node.label.as_deref().unwrap_or("?")
            )
        })?;
        split_experts(graph, i, add, &mut sh)?;
    }
    if sh.cuts.is_empty() {
        return Err("the model has no mixture-of-experts layers".into());
    }
    Ok(sh)
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
