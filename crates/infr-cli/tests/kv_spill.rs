//! Memory issue: a KV cache that does not fit the GPU's budget (forced small through
//! `device.memory_limit`) goes to host memory with `kv.spill_to_host` (the default) and the
//! run gives the same tokens as without a limit; with spilling off the same run is refused up
//! front with the sizes. Runs on the first Vulkan device (lavapipe in CI).

mod common;

const UNSET: &[&str] = &["INFR_DEVICE_MEMORY_LIMIT", "INFR_KV_SPILL_TO_HOST"];

/// `infr run` of the qwen3 synth model with a 32k context on Vulkan0: `prompt` as raw text,
/// `n` greedy tokens, logging at info.
fn run(prompt: &str, n: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    run_with(prompt, n, &[], env)
}

/// [`run`] with more arguments.
fn run_with(prompt: &str, n: &str, extra: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    let mut args = vec![
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
    args.extend_from_slice(extra);
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

/// The up-front check counts the largest step's activations beside the weights and the KV
/// cache: with 8,192-token prefill steps (`--ubatch-size`), a budget that holds the weights and
/// the KV cache with room to spare is refused before anything is allocated, with the three
/// sizes; a budget of the three (and two MiB for temporaries) runs.
#[test]
fn activations_count_in_the_up_front_check() {
    if !common::vulkan_present() {
        return;
    }
    let prompt = vec!["hello world"; 300].join(" ");
    let run = |limit: &str| {
        run_with(
            &prompt,
            "2",
            &["--ubatch-size", "8192"],
            &[("INFR_DEVICE_MEMORY_LIMIT", limit), ("INFR_KV_SPILL_TO_HOST", "0")],
        )
    };
    let (ok, _, err) = run("8m");
    assert!(!ok, "{err}");
    let mib = |err: &str, after: &str| -> u64 {
        let at = err.find(after).unwrap_or_else(|| panic!("no '{after}' in: {err}")) + after.len();
        err[at..].trim_start().split(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{err}"))
    };
    let (weights, kv) = (mib(&err, "the model needs"), mib(&err, "tokens another"));
    let act = mib(&err, "8192-token step at least");
    assert!(act >= 8, "activations of an 8192-token step: {act} MiB");
    let (ok, _, err) = run(&format!("{}m", weights + kv + 2));
    assert!(!ok && err.contains("MiB available, but the model needs"), "not refused up front: {err}");
    let (ok, _, err) = run(&format!("{}m", weights + kv + act + 2));
    assert!(ok, "{err}");
}
