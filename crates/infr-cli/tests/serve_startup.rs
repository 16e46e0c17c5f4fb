//! `infr serve` refuses settings that would silently weaken it, before loading anything.

use std::process::Command;

/// Hardening issue, defect 8: an empty API key (`--api-key ''`, `INFR_API_KEY=`) must not
/// start an open server that the user believes is protected.
#[test]
fn an_empty_api_key_refuses_to_start() {
    let exe = env!("CARGO_BIN_EXE_infr");
    let dir = std::env::temp_dir();
    for (args, env) in [
        (vec!["serve", "no-such-model.gguf", "--api-key", ""], None),
        (vec!["serve", "no-such-model.gguf"], Some(("INFR_API_KEY", ""))),
        (vec!["serve", "no-such-model.gguf", "--api-key", "   "], None),
    ] {
        let mut cmd = Command::new(exe);
        cmd.args(&args).current_dir(&dir).env_remove("INFR_API_KEY").env_remove("INFR_SERVER_API_KEY");
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("runs infr");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: started with an empty key");
        assert!(err.contains("api_key is set but empty"), "{args:?}: {err}");
    }
}

/// Agent-clients issue, defect 5: `-c` above the model's trained context is accepted but not
/// silently: the log says so and whether RoPE scaling covers it.
#[test]
fn a_context_past_training_is_warned_about() {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_infr"))
        .args(["run", model.to_str().unwrap(), "--raw", "hi", "-n", "1", "-c", "5000"])
        .output()
        .expect("runs infr");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("longer than the 4096") && err.contains("no RoPE scaling"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_infr"))
        .args(["run", model.to_str().unwrap(), "--raw", "hi", "-n", "1", "-c", "4096"])
        .output()
        .expect("runs infr");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("longer than"));
}
