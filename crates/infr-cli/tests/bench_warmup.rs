//! `infr bench --warmup-runs N` runs N warm-ups of every test before its timed runs (the short
//! one llama-bench does, then whole repetitions), and none with 0 or `--no-warmup`.

use std::process::Command;

/// The tiny synthetic Qwen3 of the oracle tests.
fn model() -> String {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    p.to_string_lossy().into_owned()
}

/// The warm-up lines `infr bench` logs at debug level, with `extra` arguments.
fn warmups(extra: &[&str]) -> Vec<String> {
    let model = model();
    let mut args = vec!["bench", "-m", &model, "--dev", "cpu", "-p", "16", "-n", "2", "-r", "1", "--log", "debug"];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_infr")).args(&args).output().expect("runs infr");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{extra:?}: {err}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("pp16") && table.contains("tg2"), "{extra:?}: no results: {table}");
    err.lines().filter(|l| l.contains("warm-up run")).map(|l| l.to_string()).collect()
}

#[test]
fn warmup_runs_sets_how_many_warmups_each_test_gets() {
    let three = warmups(&["--warmup-runs", "3"]);
    for test in ["pp16", "tg2"] {
        for i in 1..=3 {
            let want = format!("bench {test}: warm-up run {i} of 3");
            assert!(three.iter().any(|l| l.contains(&want)), "missing {want:?} in {three:#?}");
        }
    }
    assert_eq!(three.len(), 6, "{three:#?}");
    assert_eq!(warmups(&[]).len(), 2, "one warm-up per test by default");
    assert!(warmups(&["--warmup-runs", "0"]).is_empty());
    assert!(warmups(&["--warmup-runs", "3", "--no-warmup"]).is_empty());
}
