//! Memory kinds of the KV cache: sliding-window layers keep a ring of pages per sequence
//! (bounded, whatever the context) and still give llama.cpp's logits after the ring wraps;
//! KV-sharing layers allocate nothing; a cached prefix whose window was overwritten is not
//! reused.

mod common;

use infr_core::{Backend, GgufWeights};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::oracle::{compare, Oracle};
use infr_engine::{Runner, RunnerOptions, StepItem};

fn synth(name: &str) -> (GgufWeights, Oracle) {
    let dir = common::repo().join("testdata/oracle/synth");
    let o = Oracle::from_json(&std::fs::read_to_string(dir.join(format!("{name}__fox.json"))).unwrap()).unwrap();
    (GgufWeights::open(dir.join(format!("{name}.gguf"))).unwrap(), o)
}

fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).unwrap())
}

fn runner(w: &GgufWeights, backend: Box<dyn Backend>, n_ctx: usize, ubatch: usize) -> Runner {
    let model = infr_models::load_model(w).expect("model loads");
    let opts = RunnerOptions { n_ctx, ubatch, page_size: 4, ..Default::default() };
    Runner::new(model, w, backend, opts).expect("runner")
}

/// Window 8, pages of 4, steps of `ubatch`: the ring is a few pages of a 64-token context and
/// wraps several times over the 32 tokens; the rows must still match llama.cpp's.
fn ring_matches_llama_cpp(name: &str, make: &dyn Fn() -> Box<dyn Backend>, ubatch: usize) {
    let (w, o) = synth(name);
    let mut r = runner(&w, make(), 64, ubatch);
    let spec = r.kv_spec().clone();
    assert!(spec.n_window_pages > 0 && (spec.n_window_pages as usize) < spec.n_pages as usize, "{spec:?}");
    let nv = r.n_vocab();
    let seq = r.add_sequence();
    let ids: Vec<u32> = o.prompt_ids.iter().chain(&o.greedy_ids[..o.greedy_ids.len() - 1]).copied().collect();
    let mut rows = Vec::new();
    for chunk in ids.chunks(ubatch) {
        let out = r.step(&[StepItem { seq, tokens: chunk, all_logits: true }]).expect("step");
        rows.extend(out[0].chunks(nv).map(<[f32]>::to_vec));
    }
    let rep = compare(&o, &rows, &o.greedy_ids, 0.5);
    eprintln!("{name} ring (ubatch {ubatch}, {} window pages): {rep:?}", spec.n_window_pages);
    let failures = rep.failures();
    assert!(failures.is_empty(), "{name}: {}", failures.join("; "));

    // The ring holds only the last pages: a cut whose window was overwritten keeps nothing,
    // one whose window is still there keeps the prefix.
    let len = ids.len();
    assert_eq!(r.truncate(seq, 9).unwrap(), 0, "{name}: an overwritten window cannot be reused");
    r.prefill(seq, &ids, false).unwrap();
    assert_eq!(r.truncate(seq, len - 2).unwrap(), len - 2, "{name}: the last window is still cached");
}

#[test]
fn sliding_window_ring_cpu() {
    for name in ["gemma4", "gemma4-e"] {
        for ub in [1, 3] {
            ring_matches_llama_cpp(name, &cpu, ub);
        }
    }
}

#[test]
fn sliding_window_ring_vulkan() {
    if common::vulkan().is_none() {
        return;
    }
    let make = || common::vulkan().expect("vulkan");
    for name in ["gemma4", "gemma4-e"] {
        ring_matches_llama_cpp(name, &make, 3);
    }
}

/// The windowed layers' memory does not grow with the context; the global layers' does; the
/// KV-sharing layers have none.
#[test]
fn window_memory_is_bounded_and_shared_layers_have_none() {
    let (w, _) = synth("gemma4-e");
    let small = runner(&w, cpu(), 1024, 64).kv_spec().clone();
    let large = runner(&w, cpu(), 32768, 64).kv_spec().clone();
    // 6 layers, the last 2 read layers 2 and 3's cache.
    assert_eq!(small.layers.len(), 4);
    let bytes = |s: &infr_core::KvSpec, windowed: bool| -> u64 {
        s.layers.iter().filter(|l| l.window.is_some() == windowed).map(|l| s.layer_bytes(l)).sum()
    };
    eprintln!(
        "windowed layers: {} / {} bytes; global layers: {} / {} bytes (1k / 32k context)",
        bytes(&small, true),
        bytes(&large, true),
        bytes(&small, false),
        bytes(&large, false)
    );
    assert_eq!(bytes(&small, true), bytes(&large, true));
    assert_eq!(bytes(&large, false), 32 * bytes(&small, false));
}
