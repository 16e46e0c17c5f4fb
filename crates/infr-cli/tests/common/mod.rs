//! Helpers of the CLI tests: run the `infr` binary, ask whether a Vulkan device is there,
//! read its output up to a marker, signal a running `infr` and wait for it to end. Each test
//! file uses some of them.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Run `infr` with `args`, the variables of `unset` removed and `env` set: (success, stdout,
/// stderr).
pub fn infr(args: &[&str], unset: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_infr"));
    cmd.args(args);
    for k in unset {
        cmd.env_remove(k);
    }
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

/// A real test model (`INFR_TEST_MODELS`, else `./models`), or `None` (skip) when it is not
/// there, unless `INFR_REQUIRE_MODELS` is set (then it fails).
pub fn real_model(file: &str) -> Option<String> {
    let dir = std::env::var_os("INFR_TEST_MODELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    let path = dir.join(file);
    if path.exists() {
        return Some(path.to_string_lossy().into_owned());
    }
    assert!(std::env::var("INFR_REQUIRE_MODELS").is_err(), "missing test model {}", path.display());
    eprintln!("skipping: no {}", path.display());
    None
}

/// Whether `infr devices` lists Vulkan0; without one a test skips, unless
/// `INFR_REQUIRE_VULKAN` is set (then it fails).
pub fn vulkan_present() -> bool {
    let (_, devices, _) = infr(&["devices"], &[], &[]);
    if devices.contains("Vulkan0") {
        return true;
    }
    assert!(std::env::var("INFR_REQUIRE_VULKAN").is_err(), "no Vulkan device: {devices}");
    eprintln!("skipping: no Vulkan device");
    false
}

/// Read `from` until what was read contains `marker`; returns it. Fails, naming `what` and
/// what came so far, if the stream ends first.
pub fn read_until(from: &mut impl Read, marker: &str, what: &str) -> String {
    let mut seen = String::new();
    let mut buf = [0u8; 1024];
    while !seen.contains(marker) {
        let n = from.read(&mut buf).unwrap();
        assert!(n > 0, "{what}: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    seen
}

/// Send a signal (`-INT`, `-TERM`) with the shell's `kill` builtin (no procps needed).
pub fn signal(child: &Child, sig: &str) {
    let cmd = format!("kill {sig} {}", child.id());
    assert!(Command::new("sh").args(["-c", &cmd]).status().unwrap().success());
}

/// Wait up to `within` for `child` to end; past it, kill it and fail.
pub fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t.elapsed() > within {
            let _ = child.kill();
            panic!("infr still running {within:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
