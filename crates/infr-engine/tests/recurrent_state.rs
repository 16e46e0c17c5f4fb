//! Per-sequence recurrent state of the hybrid DeltaNet models (Qwen3.5 synth file): the same
//! logits whatever the prefill chunking, token-by-token decode, several sequences in one
//! step, and prefix reuse through the snapshot — on the CPU and on Vulkan.

mod common;

use infr_core::{Backend, GgufWeights};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::oracle::Oracle;
use infr_engine::{Runner, RunnerOptions, StepItem};

fn synth(name: &str) -> (GgufWeights, Oracle) {
    let dir = common::repo().join("testdata/oracle/synth");
    let o = Oracle::from_json(&std::fs::read_to_string(dir.join(format!("{name}__fox.json"))).unwrap()).unwrap();
    (GgufWeights::open(dir.join(format!("{name}.gguf"))).unwrap(), o)
}

fn runner(w: &GgufWeights, backend: Box<dyn Backend>, ubatch: usize, n_seq: usize) -> Runner {
    let model = infr_models::load_model(w).expect("model loads");
    let opts = RunnerOptions { n_ctx: 64, n_seq, ubatch, page_size: 16, ..Default::default() };
    Runner::new(model, w, backend, opts).expect("runner")
}

fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).unwrap())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The teacher-forced token stream of the oracle: prompt then llama.cpp's continuation.
fn stream(o: &Oracle) -> Vec<u32> {
    o.prompt_ids.iter().chain(&o.greedy_ids).copied().collect()
}

/// Logit rows that should be the same computation, up to float noise.
fn agree(what: &str, rows: &[f32], reference: &[f32]) {
    assert_eq!(rows.len(), reference.len(), "{what}: row count");
    let per_row: Vec<f32> = rows.chunks(NV).zip(reference.chunks(NV)).map(|(a, b)| max_diff(a, b)).collect();
    let worst = per_row.iter().copied().fold(0.0, f32::max);
    eprintln!("{what}: worst row differs by {worst:.2e}");
    assert!(worst < 2e-3, "{what}: rows differ by up to {worst}: {per_row:?}");
}

/// Vocabulary of the synth files.
const NV: usize = 49152;

/// Token-by-token decode is the reference; prefill in chunks of other sizes must carry the
/// state across steps to the same logits. (A GPU takes other matmul kernels beyond 16 rows,
/// whose last-bit differences a recurrent state keeps, so larger steps are compared with
/// llama.cpp by the oracle tests instead.)
fn chunking_and_decode_agree(name: &str, make: &dyn Fn() -> Box<dyn Backend>) {
    let (w, o) = synth(name);
    let ids = stream(&o);
    let reference = runner(&w, make(), 1, 1).prefill_all(&ids);
    for ubatch in [2, 3, 7, 16] {
        let rows = runner(&w, make(), ubatch, 1).prefill_all(&ids);
        agree(&format!("{name}: prefill in chunks of {ubatch}"), &rows, &reference);
    }
    // Two sequences advancing in the same steps (one started later) see their own state.
    let mut r = runner(&w, make(), 512, 2);
    let (a, b) = (r.add_sequence(), r.add_sequence());
    let nv = r.n_vocab();
    let split = 9;
    let mut rows_a = r.step(&[StepItem { seq: a, tokens: &ids[..split], all_logits: true }]).unwrap().remove(0);
    let mut rows_b = Vec::new();
    for t in split..ids.len() {
        let i = t - split;
        let out = r
            .step(&[
                StepItem { seq: a, tokens: &ids[t..t + 1], all_logits: false },
                StepItem { seq: b, tokens: &ids[i..i + 1], all_logits: false },
            ])
            .unwrap();
        rows_a.extend_from_slice(&out[0]);
        rows_b.extend_from_slice(&out[1]);
    }
    agree(&format!("{name}: interleaved sequence a"), &rows_a, &reference);
    let n_b = ids.len() - split;
    agree(&format!("{name}: interleaved sequence b"), &rows_b, &reference[..n_b * nv]);
}

/// Cutting a sequence back reuses the snapshot taken at the end of its prompt, or starts over;
/// either way the logits equal a cold run.
fn snapshot_reuse(name: &str, make: &dyn Fn() -> Box<dyn Backend>) {
    let (w, o) = synth(name);
    let ids = stream(&o);
    let cold = runner(&w, make(), 16, 1).prefill_all(&ids);
    let mut r = runner(&w, make(), 16, 1);
    let s = r.add_sequence();
    let p = o.prompt_ids.len();
    r.prefill(s, &ids[..p], false).unwrap();
    r.snapshot(s).unwrap();
    r.prefill(s, &ids[p..p + 6], false).unwrap();
    // Cut inside the generated part: only the snapshot (end of prompt) is reusable.
    let kept = r.truncate(s, p + 3).unwrap();
    assert_eq!(kept, p, "{name}: truncation must fall back to the snapshot");
    let rows = r.prefill(s, &ids[p..], true).unwrap();
    agree(&format!("{name}: resumed from the snapshot"), &rows, &cold[p * NV..]);
    // Cut below the snapshot: nothing is reusable.
    let kept = r.truncate(s, p - 2).unwrap();
    assert_eq!(kept, 0, "{name}: a cut below the snapshot keeps nothing");
    let rows = r.prefill(s, &ids, true).unwrap();
    agree(&format!("{name}: restarted"), &rows, &cold);
    // Keeping everything keeps the live state.
    assert_eq!(r.truncate(s, ids.len()).unwrap(), ids.len());
}

trait PrefillAll {
    fn prefill_all(&mut self, ids: &[u32]) -> Vec<f32>;
}

impl PrefillAll for Runner {
    fn prefill_all(&mut self, ids: &[u32]) -> Vec<f32> {
        let s = self.add_sequence();
        self.prefill(s, ids, true).expect("prefill")
    }
}

#[test]
fn qwen35_state_cpu() {
    chunking_and_decode_agree("qwen35", &cpu);
    snapshot_reuse("qwen35", &cpu);
    // On the CPU every step shape runs the same kernels: one step gives the same logits.
    let (w, o) = synth("qwen35");
    let ids = stream(&o);
    let one = runner(&w, cpu(), 512, 1).prefill_all(&ids);
    let steps = runner(&w, cpu(), 1, 1).prefill_all(&ids);
    agree("qwen35: one step against token by token", &one, &steps);
}

#[test]
fn qwen35moe_state_cpu() {
    chunking_and_decode_agree("qwen35moe", &cpu);
}

#[test]
fn qwen35_state_vulkan() {
    if common::vulkan().is_none() {
        return;
    }
    let make = || common::vulkan().expect("vulkan");
    chunking_and_decode_agree("qwen35", &make);
    chunking_and_decode_agree("qwen35moe", &make);
    snapshot_reuse("qwen35", &make);
}
