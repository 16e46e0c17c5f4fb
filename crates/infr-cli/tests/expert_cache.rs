//! Memory issue: MoE experts beyond the expert cache (`INFR_CACHE`, config
//! `device.expert_cache`) stay in host memory, behind device slots filled per step
//! (`device.expert_paging`) or read across the bus, and the run gives the same tokens as with
//! every expert on the device. Runs on the first Vulkan device
//! (lavapipe in CI) with the synth MoE models (Q8_0/Q4 experts and gpt-oss's MXFP4 ones).

mod common;

const UNSET: &[&str] = &["INFR_CACHE", "INFR_EXPERT_PAGING", "INFR_DEVICE_MEMORY_LIMIT", "INFR_DEVICE_GPU_LAYERS"];

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
    // (model, a cache that holds one token's experts of each layer: 2 of qwen3moe's 8 experts
    // (top-2), 4 of gpt-oss's 8 (top-4)).
    for (model, slots_cache) in [("qwen3moe", "25%"), ("gpt-oss", "50%")] {
        let (ok, want, err) = generate(model, &[]);
        assert!(ok && !err.contains("expert weights are in host memory"), "{model}: {err}");
        // Device slots filled per step (least recently used out), then whole layers (paging
        // off, or a cache too small for one token's experts).
        let runs = [(slots_cache, "1", true), (slots_cache, "0", false), ("1", "1", false)];
        for (cache, paging, paged) in runs {
            let env = [("INFR_CACHE", cache), ("INFR_EXPERT_PAGING", paging)];
            let (ok, got, err) = generate(model, &env);
            let what = format!("{model}, INFR_CACHE={cache}, INFR_EXPERT_PAGING={paging}");
            assert!(ok && err.contains("expert weights are in host memory"), "{what}: {err}");
            assert_eq!(err.contains("with a device cache of"), paged, "{what}: {err}");
            if paged {
                // Every decode step routed to experts in their slots or copied them in.
                let stats =
                    err.split("expert cache: ").nth(1).unwrap_or_else(|| panic!("{what}: no statistics: {err}"));
                let n: Vec<u64> = stats.split_whitespace().take(4).filter_map(|w| w.parse().ok()).collect();
                assert!(n.len() == 2 && n[0] > 0 && n[1] > 0, "{what}: {stats}");
            }
            assert_eq!(got, want, "{what}: tokens");
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
