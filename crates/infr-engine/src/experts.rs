//! Where a mixture-of-experts model's expert weights live: in device memory up to the expert
//! cache's size, in host memory (read by the device across the bus) beyond it. A model whose
//! experts do not fit beside the rest of the weights and the KV cache runs this way instead of
//! failing, as llama.cpp's `--n-cpu-moe` keeps experts off the GPU; `INFR_CACHE` (config
//! `device.expert_cache`) sizes it by hand.

use std::collections::HashSet;

use infr_core::WeightId;
use infr_models::Model;

/// Whether tensor `name` holds MoE experts (`ffn_{gate,up,down,gate_up}_exps` and their
/// biases): 3-D tensors indexed by expert.
pub fn is_expert_weight(name: &str) -> bool {
    name.contains("_exps.")
}

/// Bytes of `model`'s expert weights (0 for a dense model).
pub fn expert_weight_bytes(model: &Model) -> u64 {
    expert_tensors(model).iter().map(|&(_, _, b)| b).sum()
}

/// The expert tensors as (layer, id, bytes), in layer order.
fn expert_tensors(model: &Model) -> Vec<(usize, WeightId, u64)> {
    let mut t: Vec<(usize, WeightId, u64)> = model
        .weights
        .iter()
        .filter(|(_, name)| is_expert_weight(name))
        .map(|(id, name)| (layer_of(name), id, model.weights.info(id).bytes()))
        .collect();
    t.sort_by_key(|&(layer, id, _)| (layer, id.0));
    t
}

/// The layer of `blk.N.…` (0 for other names).
fn layer_of(name: &str) -> usize {
    name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// Bytes of expert weights to keep on a device with `available` bytes free (if it says), for
/// a model of `weights` bytes of which `experts` are experts, beside a KV cache of `kv`
/// bytes: the configured cache (at most every expert), else every expert where all fits, else
/// what is left after the other weights, the cache and a sixteenth of the device kept for the
/// step plans' activations.
pub fn device_expert_budget(cache: Option<u64>, available: Option<u64>, weights: u64, experts: u64, kv: u64) -> u64 {
    match (cache, available) {
        (Some(b), _) => b.min(experts),
        (None, Some(avail)) if weights.saturating_add(kv) > avail => {
            avail.saturating_sub(avail / 16).saturating_sub(weights - experts + kv).min(experts)
        }
        _ => experts,
    }
}

/// The expert tensors that go to host memory when `device_bytes` of experts may stay on the
/// device: the first layers' experts fill the device, whole tensors at a time; the rest, and
/// their total bytes.
pub(crate) fn host_experts(model: &Model, device_bytes: u64) -> (HashSet<WeightId>, u64) {
    let mut used = 0u64;
    let mut host = HashSet::new();
    let mut host_bytes = 0;
    for (_, id, bytes) in expert_tensors(model) {
        if used + bytes <= device_bytes {
            used += bytes;
        } else {
            host.insert(id);
            host_bytes += bytes;
        }
    }
    (host, host_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expert_tensors_are_recognised_by_name() {
        assert!(is_expert_weight("blk.3.ffn_gate_exps.weight"));
        assert!(is_expert_weight("blk.0.ffn_gate_up_exps.bias"));
        assert!(!is_expert_weight("blk.3.ffn_gate_shexp.weight"));
        assert!(!is_expert_weight("blk.3.ffn_gate_inp.weight"));
        assert_eq!(layer_of("blk.17.ffn_down_exps.weight"), 17);
        assert_eq!(layer_of("token_embd.weight"), 0);
    }

    #[test]
    fn the_expert_budget_is_what_fits() {
        const G: u64 = 1 << 30;
        // A set cache wins, capped at the experts.
        assert_eq!(device_expert_budget(Some(5 * G), Some(80 * G), 20 * G, 16 * G, G), 5 * G);
        assert_eq!(device_expert_budget(Some(50 * G), None, 20 * G, 16 * G, G), 16 * G);
        // Everything fits (or the device does not say): every expert stays.
        assert_eq!(device_expert_budget(None, Some(80 * G), 20 * G, 16 * G, G), 16 * G);
        assert_eq!(device_expert_budget(None, None, 20 * G, 16 * G, G), 16 * G);
        // 16 GiB free for 20 GiB of weights (16 of experts) and 1 GiB of KV: 4 of other
        // weights, 1 of KV and 1 kept for activations leave 10 for experts.
        assert_eq!(device_expert_budget(None, Some(16 * G), 20 * G, 16 * G, G), 10 * G);
        // Not even the rest fits: no expert on the device (the fit check then refuses).
        assert_eq!(device_expert_budget(None, Some(4 * G), 20 * G, 16 * G, G), 0);
    }
}
