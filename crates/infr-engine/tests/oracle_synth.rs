//! Architectures whose real weights cannot be fetched here, on tiny random-weight GGUFs
//! (`testdata/oracle/synth/`, made by `../shared/oracle/synth/make_synth.py`) against the logits
//! llama.cpp computed on the same files: the oracle README's rules on CPU and on Vulkan.

mod common;

use std::path::PathBuf;

use infr_core::{Backend, GgufWeights};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::oracle::{compare, Oracle};

fn synth_dir() -> PathBuf {
    common::repo().join("testdata/oracle/synth")
}

fn check(name: &str, backend: Box<dyn Backend>) {
    let o = Oracle::from_json(&std::fs::read_to_string(synth_dir().join(format!("{name}__fox.json"))).unwrap())
        .expect("oracle parses");
    let w = GgufWeights::open(synth_dir().join(format!("{name}.gguf"))).expect("synthetic model opens");
    // Random weights leave many near-ties (top-1 margins down to ~0.002), so a free-running
    // greedy continuation diverges at the first flip and leaves few rows to compare; feed
    // llama.cpp's own continuation instead (teacher forcing, rule 2 of the oracle README) so
    // every row is scored.
    let rows = common::teacher_forced_rows(&w, backend, &o);
    let rep = compare(&o, &rows, &o.greedy_ids, 0.5);
    eprintln!("{name}: {rep:?}");
    let failures = rep.failures();
    assert!(failures.is_empty(), "{name}: {}", failures.join("; "));
}

/// The prompt in one step, then llama.cpp's continuation one token per step (teacher forced):
/// the decode path, whose state a recurrent model carries from step to step.
fn check_decode(name: &str, backend: Box<dyn Backend>) {
    let o = Oracle::from_json(&std::fs::read_to_string(synth_dir().join(format!("{name}__fox.json"))).unwrap())
        .expect("oracle parses");
    let w = GgufWeights::open(synth_dir().join(format!("{name}.gguf"))).expect("synthetic model opens");
    let model = infr_models::load_model(&w).expect("model loads");
    let opts = infr_engine::RunnerOptions { n_ctx: 64, ..Default::default() };
    let mut r = infr_engine::Runner::new(model, &w, backend, opts).expect("runner");
    let nv = r.n_vocab();
    let seq = r.add_sequence();
    let logits = r.prefill(seq, &o.prompt_ids, true).expect("prefill");
    let mut rows: Vec<Vec<f32>> = logits.chunks(nv).map(<[f32]>::to_vec).collect();
    for &t in &o.greedy_ids[..o.greedy_ids.len() - 1] {
        let out = r.step(&[infr_engine::StepItem { seq, tokens: &[t], all_logits: false }]).expect("step");
        rows.push(out.into_iter().next().unwrap());
    }
    let rep = compare(&o, &rows, &o.greedy_ids, 0.5);
    eprintln!("{name} (decode): {rep:?}");
    let failures = rep.failures();
    assert!(failures.is_empty(), "{name} (decode): {}", failures.join("; "));
}

fn cpu() -> Box<dyn Backend> {
    Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).unwrap())
}

#[test]
fn qwen3_cpu_matches_llama_cpp() {
    check("qwen3", cpu());
}

#[test]
fn qwen3_reference_kernels_match_llama_cpp() {
    check("qwen3", Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Reference }).unwrap()));
}

#[test]
fn qwen3_vulkan_matches_llama_cpp() {
    if let Some(b) = common::vulkan() {
        check("qwen3", b);
    }
}

#[test]
fn qwen3moe_cpu_matches_llama_cpp() {
    check("qwen3moe", cpu());
}

#[test]
fn qwen3moe_reference_kernels_match_llama_cpp() {
    check("qwen3moe", Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Reference }).unwrap()));
}

#[test]
fn qwen3moe_vulkan_matches_llama_cpp() {
    if let Some(b) = common::vulkan() {
        check("qwen3moe", b);
    }
}

#[test]
fn llama4_cpu_matches_llama_cpp() {
    check("llama4", cpu());
}

#[test]
fn llama4_vulkan_matches_llama_cpp() {
    if let Some(b) = common::vulkan() {
        check("llama4", b);
    }
}

#[test]
fn gpt_oss_cpu_matches_llama_cpp() {
    check("gpt-oss", cpu());
}

#[test]
fn gpt_oss_vulkan_matches_llama_cpp() {
    if let Some(b) = common::vulkan() {
        check("gpt-oss", b);
    }
}

#[test]
fn qwen35_cpu_matches_llama_cpp() {
    check("qwen35", cpu());
}

#[test]
fn qwen35_vulkan_matches_llama_cpp() {
    if let Some(b) = common::vulkan() {
        check("qwen35", b);
    }
    if let Some(b) = common::vulkan() {
        check_decode("qwen35", b);
    }
}

#[test]
fn qwen35_decode_cpu_matches_llama_cpp() {
    check_decode("qwen35", cpu());
    check_decode("qwen35moe", cpu());
}

#[test]
fn qwen35moe_cpu_matches_llama_cpp() {
    check("qwen35moe", cpu());
}

#[test]
fn qwen35moe_vulkan_matches_llama_cpp() {
    if let Some(b) = common::vulkan() {
        check("qwen35moe", b);
    }
    if let Some(b) = common::vulkan() {
        check_decode("qwen35moe", b);
    }
}

#[test]
fn gemma4_cpu_matches_llama_cpp() {
    for name in ["gemma4", "gemma4-e", "gemma4-moe"] {
        check(name, cpu());
        check_decode(name, cpu());
    }
}

#[test]
fn gemma4_vulkan_matches_llama_cpp() {
    for name in ["gemma4", "gemma4-e", "gemma4-moe"] {
        if let Some(b) = common::vulkan() {
            check(name, b);
        }
        if let Some(b) = common::vulkan() {
            check_decode(name, b);
        }
    }
}
