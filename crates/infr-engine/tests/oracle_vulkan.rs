//! The real models on the Vulkan backend (lavapipe in CI, the GPU where there is one) against
//! llama.cpp's logits. lavapipe is a slow software rasterizer, so CI runs the shorter cases of
//! every model; `INFR_ORACLE_ALL=1` runs all sixteen.

mod common;

fn check(filter: &str) {
    if common::vulkan().is_none() {
        return;
    }
    let n = common::check_all(filter, &|| common::vulkan().expect("device opened before"));
    eprintln!("{n} cases on Vulkan");
}

fn all() -> bool {
    std::env::var("INFR_ORACLE_ALL").is_ok_and(|v| v == "1")
}

#[test]
fn smollm2_vulkan_matches_llama_cpp() {
    check(if all() { "smollm2" } else { "smollm2-135m-instruct-q4_1__chat" });
}

#[test]
fn gemma3_vulkan_matches_llama_cpp() {
    check(if all() { "gemma3" } else { "gemma3-270m-q4_k_m__short" });
}

/// Gemma 3's long case (310 prompt tokens) wants every prompt row's logits: 310 rows of its
/// 262,144-token vocabulary are 325 MB, past lavapipe's 128 MiB storage binding (Vulkan's
/// guaranteed minimum), which the step refused before the runner split such prompts into
/// steps whose logits fit one (~67 s on lavapipe).
#[test]
fn every_prompt_row_fits_the_device_bindings() {
    check("gemma3-270m-q4_k_m__long");
}

#[test]
fn qwen05_vulkan_matches_llama_cpp() {
    check(if all() { "qwen2.5-coder-0.5b" } else { "qwen2.5-coder-0.5b-instruct-awq-q4_k_m__code" });
}

#[test]
fn qwen15_vulkan_matches_llama_cpp() {
    check(if all() { "qwen2.5-coder-1.5b" } else { "qwen2.5-coder-1.5b-instruct-q4_k_m__short" });
}

/// A q8_0 KV cache against llama.cpp's own runs with one (`testdata/oracle/logits_kv_q8_0`):
/// the cache written and read as q8_0 blocks on the device, the query through q8_0 as ggml's
/// flash attention does. CI runs SmolLM2's file (lavapipe takes ~45 s per file);
/// `INFR_ORACLE_ALL=1` all four.
#[test]
fn q8_0_cache_vulkan_matches_llama_cpp() {
    if common::vulkan().is_none() {
        return;
    }
    let filters: &[&str] = if all() { &[""] } else { &["smollm2"] };
    for f in filters {
        let n = common::check_dir("testdata/oracle/logits_kv_q8_0", infr_core::KvDType::Q8_0, f, &|| {
            common::vulkan().expect("device opened before")
        });
        assert!(n > 0, "no q8_0 oracle files for {f:?}");
    }
}
