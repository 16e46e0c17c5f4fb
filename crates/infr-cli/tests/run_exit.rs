//! `infr run` ends only after its scheduler thread has released the backend: a process that
//! exits while that thread still tears a GPU device down can crash in the driver (seen on
//! NVIDIA's: a segfault or abort after a 30B model's reply).

use std::process::Command;

mod common;

/// The tiny synthetic Qwen3 of the oracle tests (it has a chat template).
fn model() -> String {
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    p.to_string_lossy().into_owned()
}

/// The CPU, and the first GPU where there is one (lavapipe in CI).
fn devices() -> &'static [&'static str] {
    if common::vulkan_present() {
        &["cpu", "Vulkan0"]
    } else {
        &["cpu"]
    }
}

#[test]
fn run_waits_for_the_scheduler_to_release_its_backend() {
    let model = model();
    for &dev in devices() {
        let out = Command::new(env!("CARGO_BIN_EXE_infr"))
            .args(["run", &model, "--raw", "hi", "-n", "2", "--dev", dev, "--log", "debug"])
            .output()
            .expect("runs infr");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{dev}: {err}");
        // The scheduler's last word comes before the process's.
        let stopped = err.find("scheduler: stopped, its backend released");
        let exiting = err.find("exiting");
        assert!(
            stopped.is_some() && exiting.is_some() && stopped < exiting,
            "{dev}: exited before the scheduler released the backend: {err}"
        );
    }
}

/// Ctrl-C at the interactive chat's prompt ends `infr run` at once with status 130, as an
/// unhandled SIGINT would, without running the exit handlers under the scheduler thread.
#[test]
fn ctrl_c_at_the_chat_prompt_ends_with_130() {
    use std::process::Stdio;
    let model = model();
    for &dev in devices() {
        let mut child = Command::new(env!("CARGO_BIN_EXE_infr"))
            .args(["run", &model, "--dev", dev])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("runs infr");
        // Wait for the chat's first prompt.
        let mut err = child.stderr.take().unwrap();
        let seen = common::read_until(&mut err, "> ", &format!("{dev}: stderr closed before the prompt"));
        common::signal(&child, "-INT");
        let status = common::wait_exit(&mut child, std::time::Duration::from_secs(10));
        assert_eq!(status.code(), Some(130), "{dev}: {status:?} {seen}");
    }
}
