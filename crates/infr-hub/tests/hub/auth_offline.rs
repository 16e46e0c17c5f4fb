//! Tokens, HTTP error mapping, `HF_ENDPOINT`, offline mode and the cache fallback.

use std::path::Path;
use std::time::Duration;

use crate::support::{bytes, MockFile, MockHub, MockRepo};
use infr_hub::{Hub, HubError, HubOptions, ProgressMode};

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn opts(endpoint: &str, cache: &Path) -> HubOptions {
    HubOptions {
        progress: ProgressMode::Never,
        max_retries: 1,
        retry_base_delay: Duration::from_millis(5),
        read_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ..HubOptions::default()
    }
    .with_endpoint(endpoint)
    .with_cache(cache)
    .with_token(None)
}

fn private_repo() -> MockRepo {
    let mut r = MockRepo::new("acme/Secret-GGUF", vec![MockFile::lfs("secret-Q4_K_M.gguf", bytes(5000, 9))]);
    r.token = Some("hf_testtoken".into());
    r
}

#[tokio::test]
async fn unauthorized_needs_token_and_token_is_sent() {
    let r = private_repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let hub = Hub::new(opts(&server.url(), cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let err = hub.resolve_str("acme/Secret-GGUF").await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(matches!(err, HubError::Unauthorized { token_sent: false, .. }), "{err}");
    assert!(err.to_string().contains("needs HF_TOKEN"), "{err}");

    let wrong = opts(&server.url(), cache.path()).with_token(Some("hf_wrong".into()));
    let err = Hub::new(wrong).unwrap_or_else(|e| panic!("{e}")).resolve_str("acme/Secret-GGUF").await.err();
    assert!(matches!(err, Some(HubError::Unauthorized { token_sent: true, .. })), "{err:?}");

    server.clear_log();
    let good = opts(&server.url(), cache.path()).with_token(Some("hf_testtoken".into()));
    let got = Hub::new(good).unwrap_or_else(|e| panic!("{e}")).resolve_str("acme/Secret-GGUF").await;
    let got = got.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(std::fs::read(&got.paths[0]).ok(), Some(r.files[0].data.clone()));
    let api: Vec<_> = server.requests().into_iter().filter(|q| q.path.starts_with("/api/")).collect();
    assert!(!api.is_empty());
    for q in &api {
        assert_eq!(q.headers.get("authorization").map(String::as_str), Some("Bearer hf_testtoken"), "{}", q.path);
    }
}

#[tokio::test]
async fn not_found_errors_name_repo_and_file() {
    let r = MockRepo::new("org/Model-GGUF", vec![MockFile::lfs("Model-Q8_0.gguf", bytes(100, 1))]);
    let server = MockHub::start(vec![r]);
    let cache = tmp();
    let hub = Hub::new(opts(&server.url(), cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let err = hub.resolve_str("org/Nope-GGUF").await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(matches!(err, HubError::RepoNotFound { .. }) && err.to_string().contains("no such repo"), "{err}");
    let err = hub.resolve_str("org/Model-GGUF@v9").await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(matches!(err, HubError::RepoNotFound { ref revision, .. } if revision == "v9"), "{err}");
    let err = hub.resolve_str("org/Model-GGUF:Model-F16.gguf").await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(err.to_string().contains("Model-Q8_0.gguf"), "lists what exists: {err}");
    let err = hub.resolve_str("org/Model-GGUF:Q5_K_M").await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(err.to_string().contains("available quants: Q8_0"), "{err}");
    let err = hub.download_file("org/Model-GGUF", "main", "config.json").await.err();
    assert!(matches!(err, Some(HubError::FileNotFound { .. })), "{err:?}");
}

#[tokio::test]
async fn hf_endpoint_and_cache_env_honoured() {
    let r = MockRepo::new("org/Model-GGUF", vec![MockFile::lfs("Model-Q4_K_M.gguf", bytes(1000, 1))]);
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let url = server.url();
    let root = cache.path().display().to_string();
    let env = move |k: &str| match k {
        "HF_ENDPOINT" => Some(format!("{url}/")),
        "HF_HUB_CACHE" => Some(root.clone()),
        "HF_TOKEN" => Some("hf_envtoken".into()),
        _ => None,
    };
    let mut o = HubOptions::from_env_with(env);
    assert_eq!(o.endpoint, server.url());
    assert_eq!(o.token.as_deref(), Some("hf_envtoken"));
    assert_eq!(o.cache.root(), cache.path());
    o.progress = ProgressMode::Never;
    let got = Hub::new(o).unwrap_or_else(|e| panic!("{e}")).resolve_str("org/Model-GGUF").await;
    assert!(got.is_ok(), "{got:?}");
    let reqs = server.requests();
    assert!(reqs.iter().any(|q| q.path == "/api/models/org/Model-GGUF/revision/main"), "{reqs:?}");
    assert!(reqs.iter().all(|q| q.headers.get("user-agent").is_some_and(|u| u.starts_with("infr/"))));
}

#[tokio::test]
async fn offline_mode_uses_cache_only() {
    let r = MockRepo::new("org/Model-GGUF", vec![MockFile::lfs("Model-Q4_K_M.gguf", bytes(1000, 1))]);
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    // Nothing cached yet: a clear error naming the missing ref; the server is never asked.
    let off = opts(&server.url(), cache.path()).with_offline(true);
    let err = Hub::new(off.clone()).unwrap_or_else(|e| panic!("{e}")).resolve_str("org/Model-GGUF").await.err();
    let msg = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("offline") && msg.contains("models--org--Model-GGUF/refs/main"), "{msg}");
    assert!(server.requests().is_empty());

    let online = Hub::new(opts(&server.url(), cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let first = online.resolve_str("org/Model-GGUF").await.unwrap_or_else(|e| panic!("{e}"));
    server.clear_log();
    let hub = Hub::new(off).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str("org/Model-GGUF:Q4_K_M").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.paths, first.paths);
    assert!(server.requests().is_empty(), "offline must not touch the network");
    // A quant that was never downloaded: named, with what the cache does hold.
    let err = hub.resolve_str("org/Model-GGUF:Q8_0").await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("offline") && err.contains("Q8_0") && err.contains("Q4_K_M"), "{err}");
    // HF_HUB_OFFLINE=1 turns offline mode on.
    assert!(HubOptions::from_env_with(|k| (k == "HF_HUB_OFFLINE").then(|| "1".to_string())).offline);
    assert!(!HubOptions::from_env_with(|k| (k == "HF_HUB_OFFLINE").then(|| "0".to_string())).offline);
}

#[tokio::test]
async fn unreachable_hub_falls_back_to_complete_cache() {
    let r = MockRepo::new("org/Model-GGUF", vec![MockFile::lfs("Model-Q4_K_M.gguf", bytes(1000, 1))]);
    let server = MockHub::start(vec![r]);
    let cache = tmp();
    let online = Hub::new(opts(&server.url(), cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let first = online.resolve_str("org/Model-GGUF").await.unwrap_or_else(|e| panic!("{e}"));
    // A closed port on loopback: connection refused.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr());
    let dead = dead.unwrap_or_else(|e| panic!("{e}"));
    let hub = Hub::new(opts(&format!("http://{dead}"), cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str("org/Model-GGUF").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.paths, first.paths);
    let err = hub.resolve_str("org/Other-GGUF").await.err();
    assert!(matches!(err, Some(HubError::Network { .. })), "{err:?}");
}

#[tokio::test]
async fn local_split_path_brings_its_shards() {
    let dir = tmp();
    for i in 1..=2 {
        std::fs::write(dir.path().join(format!("m-Q8_0-{i:05}-of-00002.gguf")), b"x").unwrap_or_else(|e| panic!("{e}"));
    }
    let first = dir.path().join("m-Q8_0-00001-of-00002.gguf");
    let hub = Hub::new(opts("http://127.0.0.1:9", dir.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(&first.display().to_string()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.paths, [first, dir.path().join("m-Q8_0-00002-of-00002.gguf")]);
    assert_eq!(got.repo, None);
}
