//! Memory issue: a KV cache that does not fit the GPU's budget (forced small through
//! `device.memory_limit`) goes to host memory with `kv.spill_to_host` (the default) and the
//! run gives the same tokens as without a limit; with spilling off the same run is refused up
//! front with the sizes. Runs on the first Vulkan device (lavapipe in CI).

mod common;

const UNSET: &[&str] = &["INFR_DEVICE_MEMORY_LIMIT", "INFR_KV_SPILL_TO_HOST"];

/// `infr run` of the qwen3 synth model with a 32k context on Vulkan0: `prompt` as raw text,
/// `n` greedy tokens, logging at info.
fn run(prompt: &str, n: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    let args = [
        "run",
        model.to_str().unwrap(),
        "--raw",
        prompt,
        "-n",
        n,
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

fn generate(env: &[(&str, &str)]) -> (bool, String, String) {
    run("hi there", "8", env)
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

/// Step activations come on top of what the up-front check counts (weights and the KV
/// cache): when they do not fit, the run fails with an error that names the device and says
/// what to change -- not a driver abort.
#[test]
fn activations_past_the_budget_fail_with_advice() {
    if !common::vulkan_present() {
        return;
    }
    // A 600-token prompt: its 512-row prefill step needs a few MiB of activations.
    let prompt = vec!["hello world"; 300].join(" ");
    let run = |limit: &str| run(&prompt, "2", &[("INFR_DEVICE_MEMORY_LIMIT", limit), ("INFR_KV_SPILL_TO_HOST", "0")]);
    // The refusal at a small budget gives the sizes the check counts.
    let (ok, _, err) = run("8m");
    assert!(!ok, "{err}");
    let mib = |after: &str| -> u64 {
        let at = err.find(after).unwrap_or_else(|| panic!("no '{after}' in: {err}")) + after.len();
        err[at..].trim_start().split(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{err}"))
    };
    let needed = mib("the model needs") + mib("tokens another");
    // One MiB above them: the check passes, the prefill step's activations do not fit.
    let (ok, _, err) = run(&format!("{}m", needed + 1));
    assert!(!ok, "ran within {} MiB", needed + 1);
    assert!(err.contains("out of memory on Vulkan0") && err.contains("lower --ctx-size"), "{err}");
    assert!(!err.contains("MiB available, but the model needs"), "refused up front: {err}");
}
