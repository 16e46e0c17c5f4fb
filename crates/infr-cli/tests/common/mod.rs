//! Helpers of the memory tests: run the `infr` binary, ask whether a Vulkan device is there.

use std::process::Command;

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
