//! `infr run` ends only after its scheduler thread has released the backend: a process that
//! exits while that thread still tears a GPU device down can crash in the driver (seen on
//! NVIDIA's: a segfault or abort after a 30B model's reply).

use std::process::Command;

mod common;

#[test]
fn run_waits_for_the_scheduler_to_release_its_backend() {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/oracle/synth/qwen3.gguf");
    let devices: &[&str] = if common::vulkan_present() { &["cpu", "Vulkan0"] } else { &["cpu"] };
    for &dev in devices {
        let out = Command::new(env!("CARGO_BIN_EXE_infr"))
            .args(["run", model.to_str().unwrap(), "--raw", "hi", "-n", "2", "--dev", dev, "--log", "debug"])
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
