//! Shared harness of the oracle tests: run a model on a backend over a reference file's
//! prompt, greedy-decode 24 tokens and score the rows with the oracle README's rules.
#![allow(dead_code)]

use std::path::PathBuf;

use infr_core::{Backend, GgufWeights, KvDType};
use infr_engine::oracle::{compare, Oracle};
use infr_engine::{Runner, RunnerOptions, StepItem};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn models_dir() -> PathBuf {
    std::env::var_os("INFR_TEST_MODELS").map(PathBuf::from).unwrap_or_else(|| repo().join("models"))
}

/// Run the prompt, then 24 greedy steps, keeping every row's logits.
pub fn run_case(w: &GgufWeights, backend: Box<dyn Backend>, o: &Oracle, kv: KvDType) -> (Vec<Vec<f32>>, Vec<u32>) {
    let model = infr_models::load_model(w).expect("model loads");
    let opts = RunnerOptions { n_ctx: o.prompt_ids.len() + 32, ubatch: 512, kv_dtype: kv, ..Default::default() };
    let mut r = Runner::new(model, w, backend, opts).expect("runner");
    let nv = r.n_vocab();
    assert!(o.n_vocab == 0 || nv == o.n_vocab, "vocabulary {nv} != oracle {}", o.n_vocab);
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

/// The logits of every row for `prompt_ids + greedy_ids` run as one prompt (teacher forcing:
/// every row has the same context as llama.cpp's), minus the last token's row.
pub fn teacher_forced_rows(w: &GgufWeights, backend: Box<dyn Backend>, o: &Oracle) -> Vec<Vec<f32>> {
    let model = infr_models::load_model(w).expect("model loads");
    let seq_ids: Vec<u32> = o.prompt_ids.iter().chain(&o.greedy_ids).copied().collect();
    let opts = RunnerOptions { n_ctx: seq_ids.len() + 8, ubatch: 512, ..Default::default() };
    let mut r = Runner::new(model, w, backend, opts).expect("runner");
    let nv = r.n_vocab();
    let seq = r.add_sequence();
    let logits = r.prefill(seq, &seq_ids, true).expect("prefill");
    logits.chunks(nv).map(<[f32]>::to_vec).collect()
}

pub fn check_all(filter: &str, make_backend: &dyn Fn() -> Box<dyn Backend>) -> usize {
    check_dir("testdata/oracle/logits", KvDType::F16, filter, make_backend)
}

/// [`check_all`] over the oracle files of `dir` (relative to the repository), with a `kv`
/// cache (`logits_kv_q8_0`: llama.cpp's runs with a q8_0 cache).
pub fn check_dir(dir: &str, kv: KvDType, filter: &str, make_backend: &dyn Fn() -> Box<dyn Backend>) -> usize {
    let dir = repo().join(dir);
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
        let backend = make_backend();
        let t = std::time::Instant::now();
        let (rows, greedy) = run_case(&w, backend, &o, kv);
        let rep = compare(&o, &rows, &greedy, 0.5);
        eprintln!("{} {}: {:?} ({:.1}s)", o.model, o.case, rep, t.elapsed().as_secs_f64());
        for fail in rep.failures() {
            failures.push(format!("{} {}: {fail}", o.model, o.case));
        }
        ran += 1;
    }
    assert!(failures.is_empty(), "oracle failures:\n{}", failures.join("\n"));
    eprintln!("{ran} oracle cases passed");
    ran
}

/// A Vulkan backend and the fewest step rows whose matmuls run over f16 operands (cooperative
/// matrices; `None`: never), as [`vulkan`] opens it.
pub fn vulkan_f16() -> Option<(Box<dyn Backend>, Option<usize>)> {
    match infr_vulkan::VulkanBackend::new(&infr_vulkan::VulkanOptions::default()) {
        Ok(b) => {
            let f16 = b.f16_min_rows();
            Some((Box::new(b), f16))
        }
        Err(e) => {
            assert!(std::env::var("INFR_REQUIRE_VULKAN").is_err(), "no Vulkan device: {e}");
            eprintln!("skipping: no Vulkan device ({e})");
            None
        }
    }
}

/// The default Vulkan device, or `None` (skip) when there is none; a failure instead when
/// `INFR_REQUIRE_VULKAN` is set (CI).
pub fn vulkan() -> Option<Box<dyn Backend>> {
    vulkan_f16().map(|(b, _)| b)
}
