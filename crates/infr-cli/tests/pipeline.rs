//! Multi-GPU issue: `--dev Vulkan0,Vulkan0` (two logical devices on one Vulkan device,
//! lavapipe in CI) splits a model's layers across them (`multi.pipeline`, `--tensor-split`)
//! and gives the tokens one device gives, or divides every layer by heads and FFN columns
//! (`multi.tensor_parallel`) or its experts (`multi.expert_parallel`); what cannot split is
//! refused with the reason.

mod common;

const UNSET: &[&str] = &[
    "INFR_DEV",
    "INFR_MULTI_PIPELINE",
    "INFR_MULTI_SPLIT",
    "INFR_MULTI_TENSOR_PARALLEL",
    "INFR_MULTI_EXPERT_PARALLEL",
    "INFR_DEVICE_GPU_LAYERS",
];

fn repo_file(rel: &str) -> String {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel).to_string_lossy().into_owned()
}

/// `infr run MODEL` greedily for 12 tokens on `dev` with `extra` flags: (ok, stdout, stderr).
fn generate(model: &str, dev: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["run", model, "--raw", "The capital of France is", "-n", "12", "--temp", "0"];
    args.extend(["--device", dev, "--log", "info"]);
    args.extend(extra);
    let (ok, out, err) = common::infr(&args, UNSET, &[]);
    // The timing line differs from run to run; the text must not.
    let text = out.lines().filter(|l| !l.starts_with("[prompt")).collect::<Vec<_>>().join("\n");
    (ok, text, err)
}

#[test]
fn a_model_split_across_two_devices_gives_the_same_tokens() {
    if !common::vulkan_present() {
        return;
    }
    let Some(smol) = common::real_model("smollm2-135m-instruct-q4_1.gguf") else { return };
    let moe = repo_file("testdata/oracle/synth/qwen3moe.gguf");
    for model in [smol.as_str(), moe.as_str()] {
        let (ok, want, err) = generate(model, "Vulkan0", &[]);
        assert!(ok && !want.is_empty(), "{model} on one device: {err}");
        for (dev, extra, bounds) in [
            ("Vulkan0,Vulkan0", &[][..], None),
            ("Vulkan0,Vulkan0", &["--tensor-split", "3,1"][..], Some("layers 0..23 on Vulkan0")),
            ("cpu,Vulkan0", &["-ts", "1,3"][..], None),
        ] {
            let (ok, got, err) = generate(model, dev, extra);
            let what = format!("{model} on {dev} {extra:?}");
            assert!(ok && err.contains("pipeline: layers 0.."), "{what}: {err}");
            if let Some(b) = bounds.filter(|_| model.contains("smollm2")) {
                assert!(err.contains(b), "{what}: the split is not 3:1 of 30 layers: {err}");
            }
            if dev.starts_with("Vulkan0") {
                // The same kernels cut in two give the same tokens.
                assert_eq!(got, want, "{what}: tokens");
            } else if model.contains("smollm2") {
                // CPU layers round differently from Vulkan ones, and SmolLM2's continuation
                // past "Paris." has near-ties that this flips on some CPUs (an AVX-512 VNNI
                // EPYC: "The answer is" against "The United States"). Token agreement of
                // mixed splits is checked under the oracle rules in oracle_synth.rs
                // (pipeline_across_cpu_and_vulkan_matches_llama_cpp); here, the clear first
                // tokens.
                assert!(got.starts_with("The capital of France is Paris."), "{what}: {got:?} against {want:?}");
            }
        }
    }
}

#[test]
fn what_cannot_split_is_refused_with_the_reason() {
    let Some(smol) = common::real_model("smollm2-135m-instruct-q4_1.gguf") else { return };
    let smol = smol.as_str();
    let refused = |model: &str, dev: &str, extra: &[&str], why: &str| {
        let (ok, _, err) = generate(model, dev, extra);
        assert!(!ok && err.contains(why), "{model} on {dev} {extra:?}: expected '{why}' in: {err}");
    };
    refused(
        smol,
        "cpu,cpu",
        &["--set", "multi.pipeline=false"],
        "multi.pipeline, multi.tensor_parallel and multi.expert_parallel are off",
    );
    refused(smol, "cpu,cpu", &["-ts", "3,x"], "bad layer share 'x'");
    refused(smol, "cpu,cpu", &["-ts", "1,1,1"], "one positive share per device (2)");
    // Gemma 4 E's later layers read the KV cache of earlier ones.
    refused(
        &repo_file("testdata/oracle/synth/gemma4-e.gguf"),
        "cpu,cpu",
        &[],
        "KV-sharing layers must stay on the device",
    );
    refused(&repo_file("testdata/diffusion/diffusion-gemma.gguf"), "cpu,cpu", &[], "diffusion models do not run");
    // Expert parallel wants MoE layers added straight to the residual.
    let ep = ["--set", "multi.expert_parallel=true"];
    refused(smol, "cpu,cpu", &ep, "no mixture-of-experts layers");
    refused(&repo_file("testdata/oracle/synth/gemma4-moe.gguf"), "cpu,cpu", &ep, "not added straight to the residual");
    // Tensor parallel wants blocks whose projections are added straight to the residual.
    let tp = ["--set", "multi.tensor_parallel=true"];
    refused(&repo_file("testdata/oracle/synth/gemma4.gguf"), "cpu,cpu", &tp, "no attention, FFN or MoE block divides");
    // Two CPU stages run (and give the tokens the CPU alone gives).
    let (ok, want, err) = generate(smol, "cpu", &[]);
    assert!(ok, "{err}");
    let (ok, got, err) = generate(smol, "cpu,cpu", &[]);
    assert!(ok && got == want, "cpu,cpu: {err}");
}

#[test]
fn experts_divided_between_two_devices_run() {
    if !common::vulkan_present() {
        return;
    }
    let moe = repo_file("testdata/oracle/synth/qwen3moe.gguf");
    let (ok, want, err) = generate(&moe, "cpu,cpu", &["--set", "multi.expert_parallel=true"]);
    assert!(ok && err.contains("expert parallel: experts 0..4 on CPU"), "{err}");
    // The same split of the CPU kernels gives the same tokens; on Vulkan the run completes and
    // logs its split (its tokens are checked against llama.cpp by the synth oracle tests).
    let (ok, got, err) = generate(&moe, "cpu,cpu", &["--set", "multi.expert_parallel=true"]);
    assert!(ok && got == want, "{err}");
    let (ok, got, err) = generate(&moe, "Vulkan0,Vulkan0", &["--set", "multi.expert_parallel=true"]);
    assert!(ok && !got.is_empty() && err.contains("expert parallel: experts 4..8 on Vulkan0"), "{err}");
}

/// Tensor parallel: SmolLM2 (9 query heads over 3 KV heads, 1,536 FFN columns, 30 layers)
/// divided among three CPU devices (a KV head each) gives the tokens one CPU gives; divided
/// between two logical Vulkan devices (one KV head and two), whose int8 activations are
/// quantized per device (other scale groups than one device's), it gives one device's top
/// token on every row where that one is clear, over the one device's greedy continuation.
#[test]
fn layers_divided_by_heads_and_columns_give_the_same_tokens() {
    let Some(smol) = common::real_model("smollm2-135m-instruct-q4_1.gguf") else { return };
    let tp = ["--set", "multi.tensor_parallel=true"];
    let (ok, want, err) = generate(&smol, "cpu", &[]);
    assert!(ok && !want.is_empty(), "{err}");
    let (ok, got, err) = generate(&smol, "cpu,cpu,cpu", &tp);
    assert!(ok && err.contains("tensor parallel: 33% of the weights of 60 divided blocks"), "{err}");
    assert_eq!(got, want, "cpu,cpu,cpu: tokens");
    if !common::vulkan_present() {
        return;
    }
    let prompt = ["--prompt", "The capital of France is", "--top", "2"];
    let (ok, out, err) =
        common::infr(&[&["eval", &smol, "--gen", "16", "--dev", "Vulkan0"][..], &prompt].concat(), UNSET, &[]);
    assert!(ok, "{err}");
    let one: serde_json::Value = serde_json::from_str(&out).expect("eval JSON");
    let ids: Vec<u64> = ["prompt_ids", "greedy_ids"]
        .iter()
        .flat_map(|k| one[k].as_array().expect("ids").iter().map(|v| v.as_u64().expect("id")))
        .collect();
    let ids = serde_json::to_string(&ids).expect("ids JSON");
    let args =
        ["eval", &smol, "--tokens", &ids, "--top", "2", "--dev", "Vulkan0,Vulkan0", "--log", "info", tp[0], tp[1]];
    let (ok, out, err) = common::infr(&args, UNSET, &[]);
    assert!(ok && err.contains("of the weights of 60 divided blocks"), "{err}");
    let split: serde_json::Value = serde_json::from_str(&out).expect("eval JSON");
    let rows = |v: &serde_json::Value| v["rows"].as_array().expect("rows").clone();
    let top = |row: &serde_json::Value, i: usize| (row["top"][i][0].as_u64(), row["top"][i][1].as_f64().unwrap_or(0.0));
    let (one, split) = (rows(&one), rows(&split));
    assert_eq!(one.len(), split.len(), "rows");
    let mut clear = 0;
    for (pos, (a, b)) in one.iter().zip(&split).enumerate() {
        let ((id, logit), (_, second)) = (top(a, 0), top(a, 1));
        if logit - second > 0.5 {
            clear += 1;
            assert_eq!(top(b, 0).0, id, "row {pos}: one device {a}, divided {b}");
        }
    }
    assert!(clear * 2 > one.len(), "only {clear} of {} rows have a clear top token", one.len());
}
