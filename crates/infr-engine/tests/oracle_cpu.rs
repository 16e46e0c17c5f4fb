//! The real models on the CPU backend against llama.cpp's logits (testdata/oracle/logits):
//! every case must pass the oracle README's rules.

mod common;

use infr_core::{Backend, KvDType};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};

fn cpu(tier: KernelTier) -> Box<dyn Backend> {
    Box::new(CpuBackend::new(CpuOptions { threads: 0, tier }).unwrap())
}

fn check_all(filter: &str) {
    common::check_all(filter, &|| cpu(KernelTier::Fast));
}

fn check_ref(filter: &str) {
    common::check_all(filter, &|| cpu(KernelTier::Reference));
}

#[test]
fn smollm2_cpu_matches_llama_cpp() {
    check_all("smollm2");
}

#[test]
fn gemma3_cpu_matches_llama_cpp() {
    check_all("gemma3");
}

#[test]
fn qwen05_cpu_matches_llama_cpp() {
    check_all("qwen2.5-coder-0.5b");
}

#[test]
fn qwen15_cpu_matches_llama_cpp() {
    check_all("qwen2.5-coder-1.5b");
}

/// The reference kernels must pass too (they are the oracle for the fast ones); one model
/// keeps the run short.
#[test]
fn smollm2_reference_kernels_match_llama_cpp() {
    check_ref("smollm2-135m-instruct-q4_1__short");
}

/// A q8_0 KV cache against llama.cpp's own runs with one (`testdata/oracle/logits_kv_q8_0`,
/// written by `testdata/oracle/make_kv_oracle.py`: same prompts, K and V cached as q8_0).
#[test]
fn q8_0_cache_cpu_matches_llama_cpp() {
    let n = common::check_dir("testdata/oracle/logits_kv_q8_0", KvDType::Q8_0, "", &|| cpu(KernelTier::Fast));
    assert!(n > 0, "no q8_0 oracle files");
}
