//! Interop with the `huggingface_hub` Python package, through the same cache directory:
//! (a) `try_to_load_from_cache` finds what we downloaded; (b) what `hf_hub_download` wrote (pointed at the
//! fake Hub through `HF_ENDPOINT`) is found by our resolver in offline mode.
//!
//! Skipped with a notice when `python3 -c "import huggingface_hub"` fails, unless `INFR_REQUIRE_PYTHON_HUB`
//! is set (then it fails).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{bytes, MockFile, MockHub, MockRepo};
use infr_hub::{Hub, HubOptions, ProgressMode};

const REPO: &str = "org/Interop-GGUF";

fn python_hub_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import huggingface_hub"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        if std::env::var_os("INFR_REQUIRE_PYTHON_HUB").is_some() {
            panic!("INFR_REQUIRE_PYTHON_HUB is set but `python3 -c \"import huggingface_hub\"` fails");
        }
        eprintln!("NOTICE: skipping huggingface_hub interop test: python3 with huggingface_hub not found");
    }
    ok
}

/// Runs a Python snippet with a bounded wall time; returns its trimmed stdout.
fn python(code: &str, env: &[(&str, String)]) -> String {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", code]).stdout(Stdio::piped()).stderr(Stdio::piped());
    for k in ["HF_TOKEN", "HF_HUB_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT", "HUGGING_FACE_HUB_TOKEN"] {
        cmd.env_remove(k);
    }
    cmd.env("HF_HUB_DISABLE_TELEMETRY", "1").env("HF_HUB_DISABLE_XET", "1").env("HF_HUB_DISABLE_PROGRESS_BARS", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("python3: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                panic!("python3 did not finish in 60 s");
            }
        }
    }
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn opts(server: &MockHub, cache: &Path) -> HubOptions {
    HubOptions { progress: ProgressMode::Never, retry_base_delay: Duration::from_millis(5), ..HubOptions::default() }
        .with_endpoint(server.url())
        .with_cache(cache)
        .with_token(None)
}

#[test]
fn huggingface_hub_and_infr_share_the_cache() {
    if !python_hub_available() {
        return;
    }
    let r = MockRepo::new(
        REPO,
        vec![
            MockFile::small("README.md", b"interop\n"),
            MockFile::lfs("Interop-Q4_K_M.gguf", bytes(150_000, 11)),
            MockFile::lfs("Interop-Q8_0.gguf", bytes(120_000, 12)),
        ],
    );
    let server = MockHub::start(vec![r.clone()]);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));

    // (a) We download; huggingface_hub finds it in the same cache.
    let ours = dir.path().join("ours");
    let got =
        infr_hub::resolve_blocking(&format!("{REPO}:Q4_K_M"), opts(&server, &ours)).unwrap_or_else(|e| panic!("{e}"));
    let code = format!(
        "from huggingface_hub import try_to_load_from_cache\n\
         p = try_to_load_from_cache({REPO:?}, 'Interop-Q4_K_M.gguf', cache_dir={:?})\n\
         print(p if isinstance(p, str) else 'NOT-CACHED')",
        ours.display().to_string()
    );
    let found = python(&code, &[]);
    assert_eq!(Path::new(&found), got.paths[0], "huggingface_hub found {found}");

    // (b) huggingface_hub downloads from the fake Hub into its own cache; we resolve it offline.
    let theirs = dir.path().join("theirs");
    let code = format!(
        "from huggingface_hub import hf_hub_download\n\
         print(hf_hub_download({REPO:?}, 'Interop-Q8_0.gguf', cache_dir={:?}))",
        theirs.display().to_string()
    );
    let downloaded = python(&code, &[("HF_ENDPOINT", server.url())]);
    let repo_dir = theirs.join("models--org--Interop-GGUF");
    assert!(repo_dir.join("refs/main").is_file(), "huggingface_hub wrote its own refs/main");
    let sha = r.files[2].sha256();
    assert!(repo_dir.join("blobs").join(&sha).is_file(), "huggingface_hub wrote blobs/<sha256>");
    assert!(server.requests().iter().any(|q| q.method == "HEAD" && q.path.contains("/resolve/main/Interop-Q8_0.gguf")));

    server.clear_log();
    let hub = Hub::new(opts(&server, &theirs).with_offline(true)).unwrap_or_else(|e| panic!("{e}"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let resolved = rt.block_on(hub.resolve_str(&format!("{REPO}:Q8_0"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resolved.paths[0], Path::new(&downloaded));
    assert_eq!(std::fs::read(&resolved.paths[0]).ok(), Some(r.files[2].data.clone()));
    assert!(server.requests().is_empty(), "offline resolve made requests");

    // And the other way around within one cache: huggingface_hub reuses our README blob, we reuse its model.
    let code = format!(
        "from huggingface_hub import hf_hub_download\n\
         print(hf_hub_download({REPO:?}, 'Interop-Q4_K_M.gguf', cache_dir={:?}))",
        ours.display().to_string()
    );
    let again = python(&code, &[("HF_ENDPOINT", server.url())]);
    assert_eq!(Path::new(&again), got.paths[0]);
    assert!(
        !server.content_gets().iter().any(|q| q.path.starts_with("/blobs/")),
        "huggingface_hub re-downloaded a blob we had"
    );
}
