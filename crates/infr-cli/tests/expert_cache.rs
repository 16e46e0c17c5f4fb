//! Memory issue: MoE experts beyond the expert cache (`INFR_CACHE`, config
//! `device.expert_cache`) stay in host memory the GPU reads across the bus, and the run gives
//! the same tokens as with every expert on the device. Runs on the first Vulkan device
//! (lavapipe in CI) with the synth MoE models (Q8_0/Q4 experts and gpt-oss's MXFP4 ones).

mod common;

const UNSET: &[&str] = &["INFR_CACHE", "INFR_DEVICE_MEMORY_LIMIT", "INFR_DEVICE_GPU_LAYERS"];

fn generate(model: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../testdata/oracle/synth/{model}.gguf"));
    let args = [
        "run",
        path.to_str().unwrap(),
        "--raw",
        "hi there",
        "-n",
        "8",
        "--temp",
        "0",
        "--device",
        "Vulkan0",
        "--log",
        "info",
    ];
    common::infr(&args, UNSET, env)
}

#[test]
fn experts_past_the_cache_run_from_host_memory_with_the_same_tokens() {
    if !common::vulkan_present() {
        return;
    }
    for model in ["qwen3moe", "gpt-oss"] {
        let (ok, want, err) = generate(model, &[]);
        assert!(ok && !err.contains("expert weights are in host memory"), "{model}: {err}");
        for cache in ["25%", "1"] {
            let (ok, got, err) = generate(model, &[("INFR_CACHE", cache)]);
            assert!(ok && err.contains("expert weights are in host memory"), "{model}, INFR_CACHE={cache}: {err}");
            assert_eq!(got, want, "{model}: tokens with experts past a cache of {cache} in host memory");
        }
    }
    // A dense model has no experts to place.
    let (ok, _, err) = generate("qwen3", &[("INFR_CACHE", "1")]);
    assert!(ok && !err.contains("expert weights"), "{err}");
}

/// Layers past `--gpu-layers` keep their weights in host memory (the GPU still computes them),
/// with the same tokens (the automatic choice of layers is `placement::layers_that_fit`).
#[test]
fn layers_past_the_gpu_share_run_from_host_memory_with_the_same_tokens() {
    if !common::vulkan_present() {
        return;
    }
    let (ok, want, err) = generate("qwen3", &[]);
    assert!(ok && !err.contains("are in host memory"), "{err}");
    let (ok, got, err) = generate("qwen3", &[("INFR_DEVICE_GPU_LAYERS", "1")]);
    assert!(ok && err.contains("the weights of layers 1..2"), "{err}");
    assert_eq!(got, want, "tokens with layer 1's weights in host memory");
}
