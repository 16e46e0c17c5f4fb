//! Where weights live on a device with memory of its own: in device memory while it lasts, in
//! host memory the device reads across the bus beyond it, instead of failing. First a
//! mixture-of-experts model's experts go to host memory (up to the expert cache's size, as
//! llama.cpp's `--n-cpu-moe` keeps experts off the GPU; `INFR_CACHE`, config
//! `device.expert_cache`, sizes it by hand), then whole layers from the last (`--gpu-layers N`
//! keeps the first N on the device by hand). The device computes every layer either way.
//! The expert cache is a set of device slots per layer that the backend fills with the
//! experts each step routes to (least recently used out, [`WeightPlace::Paged`]) where it
//! holds at least one token's experts per layer (`device.expert_paging`), else the first
//! layers' experts, whole.

use std::collections::{HashMap, HashSet};

use infr_core::{Backend, WeightId, WeightPlace};
use infr_models::Model;

use crate::{EngineError, RunnerOptions};

const MIB: u64 = 1 << 20;

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
        .map(|(id, name)| (block_of(name).unwrap_or(0), id, model.weights.info(id).bytes()))
        .collect();
    t.sort_by_key(|&(layer, id, _)| (layer, id.0));
    t
}

/// The layer of `blk.N.…`, `None` for the model's other weights (embeddings, output).
fn block_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse().ok())
}

/// Bytes of each layer's weights not already in `host`, by layer.
fn layer_bytes(model: &Model, host: &HashSet<WeightId>) -> Vec<u64> {
    let mut per = vec![0u64; model.info.n_layer];
    for (id, name) in model.weights.iter() {
        if let Some(l) = block_of(name).filter(|&l| l < per.len()) {
            if !host.contains(&id) {
                per[l] += model.weights.info(id).bytes();
            }
        }
    }
    per
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

/// Expert cache slots per layer for `device_bytes` of experts: as many experts of every layer
/// as fit (the same count each), if that holds one token's experts but not all of them and
/// every expert tensor is indexed by the model's expert count; else `None` (whole layers).
pub fn expert_slots(model: &Model, device_bytes: u64) -> Option<u32> {
    let (e, used) = (model.info.n_expert as u64, model.info.n_expert_used as u64);
    let tensors = expert_tensors(model);
    let per_expert: u64 = tensors.iter().map(|&(_, _, b)| b / e.max(1)).sum();
    let by_expert = tensors.iter().all(|&(_, id, _)| model.weights.info(id).dims.last() == Some(&(e as usize)));
    if e == 0 || used == 0 || per_expert == 0 || !by_expert {
        return None;
    }
    let slots = device_bytes / per_expert;
    (slots >= used && slots < e).then_some(slots as u32)
}

/// How many first layers of `per_layer` bytes fit a device with `avail` bytes free beside
/// `rest` bytes that stay there anyway, keeping a sixteenth of the device for the step plans'
/// activations.
pub fn layers_that_fit(per_layer: &[u64], rest: u64, avail: u64) -> usize {
    let budget = avail.saturating_sub(avail / 16);
    let mut on_device = rest;
    per_layer
        .iter()
        .take_while(|&&b| {
            on_device += b;
            on_device <= budget
        })
        .count()
}

/// Check that the model, a KV cache of `kv` bytes and the largest step's `act` bytes of
/// activations fit `backend` (refusing before anything is allocated: a huge `--ctx-size` would
/// otherwise abort the process in the allocator), and
/// choose the weights that go to host memory: experts beyond `opts.expert_cache` (or, without
/// one, those that do not fit beside the other weights and the cache), then the weights of the
/// layers from `opts.gpu_layers` on (or, without it, of as many last layers as do not fit).
/// Weights not in the map stay on the device.
pub(crate) fn place_weights(
    model: &Model,
    backend: &dyn Backend,
    opts: &RunnerOptions,
    kv: u64,
    act: u64,
) -> Result<HashMap<WeightId, WeightPlace>, EngineError> {
    let dev = || backend.device().id.clone();
    let mib = |b: u64| b as f64 / MIB as f64;
    let weights: u64 = model.weights.iter().map(|(id, _)| model.weights.info(id).bytes()).sum();
    let experts = expert_weight_bytes(model);
    let host_room = backend.weight_host_available();
    let available = backend.memory_available();
    let device_experts = match host_room {
        // Activations stay on the device beside the KV cache.
        Some(_) => device_expert_budget(opts.expert_cache, available, weights, experts, kv + act),
        None => experts,
    };
    let slots = if device_experts < experts && opts.expert_paging { expert_slots(model, device_experts) } else { None };
    let mut places = HashMap::new();
    // Device bytes of the expert cache's slots.
    let mut slot_bytes = 0;
    let (mut host, expert_host) = match slots {
        Some(s) => {
            let n_expert = model.info.n_expert as u32;
            let tensors = expert_tensors(model);
            for &(_, id, _) in &tensors {
                places.insert(id, WeightPlace::Paged { experts: n_expert, slots: s });
            }
            slot_bytes = tensors.iter().map(|&(_, _, b)| b / n_expert as u64 * s as u64).sum();
            tracing::info!(
                "{}: the {:.1} MiB of expert weights are in host memory, with a device cache of {s} of the \
                 {n_expert} experts of each layer ({:.1} MiB; least recently used out): steps that route more \
                 pairs than that read them across the bus",
                dev(),
                mib(experts),
                mib(slot_bytes)
            );
            (tensors.iter().map(|&(_, id, _)| id).collect(), experts)
        }
        None => host_experts(model, device_experts),
    };
    if expert_host > 0 && slots.is_none() {
        tracing::info!(
            "{}: {:.1} of the {:.1} MiB of expert weights are in host memory (expert cache {:.1} MiB): the \
             expert matmuls read them across the bus",
            dev(),
            mib(expert_host),
            mib(experts),
            mib(experts - expert_host)
        );
    }
    // Whole layers next: from the one asked for, or the first that does not fit. A KV cache
    // that can spill does not move layers (attention over spilled KV layers costs less than
    // reading whole layers across the bus every step).
    let n_layer = model.info.n_layer;
    let per_layer = layer_bytes(model, &host);
    let kv_dev = (if backend.kv_spill_available().is_some() { 0 } else { kv }) + act;
    let first_host = match (opts.gpu_layers, available, host_room) {
        (Some(n), _, Some(_)) => n.min(n_layer),
        (None, Some(avail), Some(_)) if weights - expert_host + kv_dev > avail => {
            let rest = weights - expert_host - per_layer.iter().sum::<u64>() + kv_dev;
            layers_that_fit(&per_layer, rest, avail)
        }
        _ => n_layer,
    };
    let mut layer_host = 0;
    if first_host < n_layer {
        for (id, name) in model.weights.iter() {
            if block_of(name).is_some_and(|l| l >= first_host) && host.insert(id) {
                layer_host += model.weights.info(id).bytes();
            }
            // A layer kept in host memory reads its experts there too, without slots.
            if block_of(name).is_some_and(|l| l >= first_host) {
                if let Some(WeightPlace::Paged { experts, slots }) = places.get(&id).copied() {
                    slot_bytes -= model.weights.info(id).bytes() / experts as u64 * slots as u64;
                }
            }
        }
        tracing::info!(
            "{}: the weights of layers {first_host}..{n_layer} ({:.1} MiB) are in host memory: the device reads \
             them across the bus every step",
            dev(),
            mib(layer_host)
        );
    }
    let host_bytes = expert_host + layer_host;
    if host_bytes > 0 {
        let room = host_room.unwrap_or(0);
        if host_bytes > room {
            return Err(EngineError::Invalid(format!(
                "{}: {} MiB of weights go to host memory, but {} MiB are available there",
                dev(),
                host_bytes.div_ceil(MIB),
                room / MIB
            )));
        }
    }
    for &id in &host {
        places.entry(id).or_insert(WeightPlace::Host);
    }
    for (id, name) in model.weights.iter() {
        if block_of(name).is_some_and(|l| l >= first_host) {
            places.insert(id, WeightPlace::Host);
        }
    }
    let Some(available) = available else { return Ok(places) };
    let weights = weights - host_bytes + slot_bytes;
    // A backend that spills KV layers to host memory needs room on the device for the
    // weights only, and the rest of the cache in host memory.
    let spill = backend.kv_spill_available().map(|h| h.saturating_sub(host_bytes));
    let on_device = weights.saturating_add(act);
    let fits = match spill {
        Some(host) => on_device <= available && on_device.saturating_add(kv).saturating_sub(available) <= host,
        None => on_device.saturating_add(kv) <= available,
    };
    if spill.is_some() && fits && on_device.saturating_add(kv) > available {
        tracing::info!(
            "{}: the KV cache ({} MiB) does not fit beside the weights; what does not fit goes to host memory",
            dev(),
            kv >> 20
        );
    }
    if !fits {
        return Err(EngineError::DoesNotFit {
            device: dev(),
            available_mib: available / MIB,
            weights_mib: weights.div_ceil(MIB),
            kv_mib: kv.div_ceil(MIB),
            n_ctx: opts.n_ctx,
            seqs: opts.n_seq,
            act_mib: act.div_ceil(MIB),
            ubatch: opts.ubatch,
        });
    }
    Ok(places)
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
        assert_eq!(block_of("blk.17.ffn_down_exps.weight"), Some(17));
        assert_eq!(block_of("token_embd.weight"), None);
    }

    #[test]
    fn the_first_layers_that_fit_stay() {
        const M: u64 = 1 << 20;
        // 160 MiB free, 10 kept for activations: 30 of embeddings + 4 layers of 30 fit.
        assert_eq!(layers_that_fit(&[30 * M; 8], 30 * M, 160 * M), 4);
        assert_eq!(layers_that_fit(&[30 * M; 8], 200 * M, 160 * M), 0);
        assert_eq!(layers_that_fit(&[M; 8], 0, 160 * M), 8);
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
