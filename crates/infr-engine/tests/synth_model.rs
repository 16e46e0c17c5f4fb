//! `infr synth` files run: the tiny shapes in every quant mix load, prefill and step on the
//! CPU backend with finite logits.

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{Runner, RunnerOptions, StepItem};
use infr_models::synth::{self, Shape, SynthPlan, SynthQuant};

/// Write a tiny synth file, prefill 5 tokens and step once; returns the step's logits.
fn run_tiny(shape: &str, quant: SynthQuant, tier: KernelTier) -> Vec<f32> {
    let plan = SynthPlan::new(Shape::by_name(shape).unwrap(), quant, None).unwrap();
    let name = format!("infr-synth-{}-{shape}-{}-{tier:?}.gguf", std::process::id(), quant.name());
    let path = std::env::temp_dir().join(name);
    synth::write(&plan, 42, &path, &mut |_, _| {}).unwrap();
    let w = GgufWeights::open(&path).unwrap();
    let model = infr_models::load_model(&w).unwrap();
    let backend = Box::new(CpuBackend::new(CpuOptions { threads: 2, tier }).unwrap());
    let opts = RunnerOptions { n_ctx: 64, ubatch: 512, ..Default::default() };
    let mut r = Runner::new(model, &w, backend, opts).unwrap();
    let nv = r.n_vocab();
    assert_eq!(nv, plan.shape.n_vocab);
    let seq = r.add_sequence();
    let logits = r.prefill(seq, &[1, 2, 300, 4, 5], true).unwrap();
    assert_eq!(logits.len(), 5 * nv);
    let out = r.step(&[StepItem { seq, tokens: &[7], all_logits: false }]).unwrap();
    let last = out.into_iter().next().unwrap();
    assert_eq!(last.len(), nv);
    let what = format!("{shape} {} {tier:?}", quant.name());
    assert!(logits.iter().chain(&last).all(|x| x.is_finite()), "{what}: non-finite logits");
    // Random weights still give distinct logits, not a constant row.
    let (lo, hi) = last.iter().fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(hi - lo > 1e-3, "{what}: flat logits {lo}..{hi}");
    drop(r);
    drop(w);
    let _ = std::fs::remove_file(&path);
    last
}

#[test]
fn synth_tiny_qwen3_runs_on_cpu() {
    for q in SynthQuant::ALL {
        run_tiny("tiny-qwen3", q, KernelTier::Fast);
    }
}

#[test]
fn synth_tiny_llama3_runs_on_cpu() {
    for q in SynthQuant::ALL {
        run_tiny("tiny-llama3", q, KernelTier::Fast);
    }
}

#[test]
fn synth_fast_and_reference_kernels_agree() {
    // Same file on both kernel tiers: the synthetic blocks are valid input for the fast
    // kernels too (they quantize activations, so allow a small relative difference).
    for q in [SynthQuant::Q4_K_M, SynthQuant::Q4_0] {
        let fast = run_tiny("tiny-qwen3", q, KernelTier::Fast);
        let reference = run_tiny("tiny-qwen3", q, KernelTier::Reference);
        let scale = reference.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = fast.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 0.05 * scale, "{}: max diff {diff} vs max |logit| {scale}", q.name());
    }
}
