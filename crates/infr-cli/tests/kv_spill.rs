//! Memory issue: a KV cache that does not fit the GPU's budget (forced small through
//! `device.memory_limit`) goes to host memory with `kv.spill_to_host` (the default) and the
//! run gives the same tokens as without a limit; with spilling off the same run is refused up
//! front with the sizes. Runs on the first Vulkan device (lavapipe in CI).

mod common;

const UNSET: &[&str] = &["INFR_DEVICE_MEMORY_LIMIT", "INFR_KV_SPILL_TO_HOST"];

fn generate(env: &[(&str, &str)]) -> (bool, String, String) {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    let args = [
        "run",
        model.to_str().unwrap(),
        "--raw",
        "hi there",
        "-n",
        "8",
        "--temp",
        "0",
        "--device",
        "Vulkan0",
        "-c",
        "32k",
        "--log",
        "info",
    ];
    common::infr(&args, UNSET, env)
}

#[test]
fn kv_cache_spills_to_host_past_a_forced_budget() {
    if !common::vulkan_present() {
        return;
    }
    // The synth model's weights are ~5 MiB; a context of 32k tokens needs 16 MiB of KV.
    let (ok, want, err) = generate(&[]);
    assert!(ok && !err.contains("host memory"), "{err}");
    let (ok, got, err) = generate(&[("INFR_DEVICE_MEMORY_LIMIT", "12m")]);
    assert!(ok && err.contains("MiB are in host memory"), "{err}");
    assert_eq!(got, want, "tokens with part of the KV cache in host memory");
    let (ok, _, err) = generate(&[("INFR_DEVICE_MEMORY_LIMIT", "12m"), ("INFR_KV_SPILL_TO_HOST", "0")]);
    assert!(!ok && err.contains("MiB available, but the model needs"), "{err}");
}
