//! Memory issue: a KV cache that does not fit the GPU's budget (forced small through
//! `device.memory_limit`) goes to host memory with `kv.spill_to_host` (the default) and the
//! run gives the same tokens as without a limit; with spilling off the same run is refused up
//! front with the sizes. Runs on the first Vulkan device (lavapipe in CI).

use std::process::Command;

fn infr(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_infr"));
    cmd.args(args).env_remove("INFR_DEVICE_MEMORY_LIMIT").env_remove("INFR_KV_SPILL_TO_HOST");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("runs infr");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
    infr(&args, env)
}

#[test]
fn kv_cache_spills_to_host_past_a_forced_budget() {
    let (_, devices, _) = infr(&["devices"], &[]);
    if !devices.contains("Vulkan0") {
        assert!(std::env::var("INFR_REQUIRE_VULKAN").is_err(), "no Vulkan device: {devices}");
        eprintln!("skipping: no Vulkan device");
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
