//! The real models on the CPU backend against llama.cpp's logits (testdata/oracle/logits):
//! every case must pass the oracle README's rules.

use std::path::PathBuf;

use infr_core::{Backend, GgufWeights};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::oracle::{compare, Oracle};
use infr_engine::{Runner, RunnerOptions, StepItem};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn models_dir() -> PathBuf {
    std::env::var_os("INFR_TEST_MODELS").map(PathBuf::from).unwrap_or_else(|| repo().join("models"))
}

/// Run the prompt, then 24 greedy steps, keeping every row's logits.
fn run_case(w: &GgufWeights, backend: Box<dyn Backend>, o: &Oracle) -> (Vec<Vec<f32>>, Vec<u32>) {
    let model = infr_models::load_model(w).expect("model loads");
    let opts = RunnerOptions { n_ctx: o.prompt_ids.len() + 32, ubatch: 512, ..Default::default() };
    let mut r = Runner::new(model, w, backend, opts).expect("runner");
    let nv = r.n_vocab();
    assert_eq!(nv, o.n_vocab);
    let seq = r.add_sequence();
    let logits = r.prefill(seq, &o.prompt_ids, true).expect("prefill");
    let mut rows: Vec<Vec<f32>> = logits.chunks(nv).map(<[f32]>::to_vec).collect();
    let mut greedy = Vec::new();
    for _ in 0..o.greedy_ids.len() {
        let next = infr_engine::argmax_token(rows.last().unwrap());
        greedy.push(next);
        let out = r.step(&[StepItem { seq, tokens: &[next], all_logits: false }]).expect("step");
        rows.push(out.into_iter().next().unwrap());
    }
    (rows, greedy)
}

fn check_all(tier: KernelTier, filter: &str) {
    let dir = repo().join("testdata/oracle/logits");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut failures = Vec::new();
    let mut ran = 0;
    for f in files.iter().filter(|f| f.to_string_lossy().contains(filter)) {
        let o = Oracle::from_json(&std::fs::read_to_string(f).unwrap()).unwrap();
        let model = models_dir().join(format!("{}.gguf", o.model));
        if !model.exists() {
            assert!(std::env::var("INFR_REQUIRE_MODELS").is_err(), "missing model {}", model.display());
            eprintln!("skipping {}: {} not found", f.display(), model.display());
            continue;
        }
        let w = GgufWeights::open(&model).unwrap();
        let backend = Box::new(CpuBackend::new(CpuOptions { threads: 0, tier }).unwrap());
        let t = std::time::Instant::now();
        let (rows, greedy) = run_case(&w, backend, &o);
        let rep = compare(&o, &rows, &greedy, 0.5);
        eprintln!("{} {}: {:?} ({:.1}s)", o.model, o.case, rep, t.elapsed().as_secs_f64());
        for fail in rep.failures() {
            failures.push(format!("{} {}: {fail}", o.model, o.case));
        }
        ran += 1;
    }
    assert!(failures.is_empty(), "oracle failures:\n{}", failures.join("\n"));
    eprintln!("{ran} oracle cases passed");
}

#[test]
fn smollm2_cpu_matches_llama_cpp() {
    check_all(KernelTier::Fast, "smollm2");
}

#[test]
fn gemma3_cpu_matches_llama_cpp() {
    check_all(KernelTier::Fast, "gemma3");
}

#[test]
fn qwen05_cpu_matches_llama_cpp() {
    check_all(KernelTier::Fast, "qwen2.5-coder-0.5b");
}

#[test]
fn qwen15_cpu_matches_llama_cpp() {
    check_all(KernelTier::Fast, "qwen2.5-coder-1.5b");
}

/// The reference kernels must pass too (they are the oracle for the fast ones); one model
/// keeps the run short.
#[test]
fn smollm2_reference_kernels_match_llama_cpp() {
    check_all(KernelTier::Reference, "smollm2-135m-instruct-q4_1__short");
}
