//! Downloads against the local fake Hub: layout, resume, parallel ranges, checksum, retries, timeouts.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{bytes, Faults, MockFile, MockHub, MockRepo};
use infr_hub::{Hub, HubError, HubOptions, ProgressMode};

const REPO: &str = "org/Model-GGUF";

fn repo() -> MockRepo {
    MockRepo::new(
        REPO,
        vec![
            MockFile::small("README.md", b"# a model\n"),
            MockFile::lfs("Model-Q4_K_M.gguf", bytes(200_000, 1)),
            MockFile::lfs("Model-Q8_0.gguf", bytes(300_000, 2)),
            MockFile::lfs("mmproj-Model-F16.gguf", bytes(1000, 3)),
            MockFile::lfs("Q2_K/Model-Q2_K-00001-of-00003.gguf", bytes(50_000, 4)),
            MockFile::lfs("Q2_K/Model-Q2_K-00002-of-00003.gguf", bytes(50_000, 5)),
            MockFile::lfs("Q2_K/Model-Q2_K-00003-of-00003.gguf", bytes(10_000, 6)),
        ],
    )
}

/// Fast, bounded options: no parallel ranges unless a test asks, tiny backoff, short read timeout.
fn opts(server: &MockHub, cache: &Path) -> HubOptions {
    HubOptions {
        progress: ProgressMode::Never,
        parallel_min_size: u64::MAX,
        max_retries: 3,
        retry_base_delay: Duration::from_millis(5),
        read_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ..HubOptions::default()
    }
    .with_endpoint(server.url())
    .with_cache(cache)
    .with_token(None)
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn file<'a>(r: &'a MockRepo, path: &str) -> &'a MockFile {
    r.files.iter().find(|f| f.path == path).unwrap_or_else(|| panic!("no {path}"))
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Nothing in the snapshot, no finished blob: what a failed download must leave.
fn assert_nothing_visible(cache: &Path, r: &MockRepo, path: &str) {
    let f = file(r, path);
    let repo_dir = cache.join("models--org--Model-GGUF");
    assert!(!repo_dir.join("blobs").join(f.sha256()).exists(), "blob must not exist");
    assert!(std::fs::symlink_metadata(repo_dir.join("snapshots").join(&r.commit).join(path)).is_err(), "no pointer");
}

#[tokio::test]
async fn downloads_into_hf_layout_and_reuses_cache() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(REPO).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.files, ["Model-Q4_K_M.gguf"]);
    assert_eq!(got.commit.as_deref(), Some(r.commit.as_str()));
    let f = file(&r, "Model-Q4_K_M.gguf");
    assert_eq!(read(&got.paths[0]), f.data);

    let repo_dir = cache.path().join("models--org--Model-GGUF");
    assert_eq!(got.paths[0], repo_dir.join("snapshots").join(&r.commit).join("Model-Q4_K_M.gguf"));
    let link = std::fs::read_link(&got.paths[0]).unwrap_or_else(|e| panic!("symlink: {e}"));
    assert_eq!(link, Path::new("../../blobs").join(f.sha256()));
    assert_eq!(std::fs::read_to_string(repo_dir.join("refs/main")).ok().as_deref(), Some(r.commit.as_str()));
    assert!(!repo_dir.join("blobs").join(format!("{}.incomplete", f.sha256())).exists());

    // Second resolve: API calls only, no content transfer.
    server.clear_log();
    let again = hub.resolve_str(&format!("{REPO}:q4_k_m")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.paths, got.paths);
    assert!(server.content_gets().is_empty(), "{:?}", server.content_gets());
}

#[tokio::test]
async fn split_shards_all_resolved_in_order() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(&format!("hf:{REPO}:Q2_K")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.paths.len(), 3);
    for (i, p) in got.paths.iter().enumerate() {
        let name = format!("Q2_K/Model-Q2_K-{:05}-of-00003.gguf", i + 1);
        assert_eq!(got.files[i], name);
        assert_eq!(read(p), file(&r, &name).data);
        // Files in subdirectories link one level further up.
        let link = std::fs::read_link(p).unwrap_or_else(|e| panic!("{e}"));
        assert!(link.starts_with("../../../blobs"), "{}", link.display());
    }
}

#[tokio::test]
async fn connection_drop_mid_file_resumes_with_range() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    server.set_faults(Faults { drop_after: Some(70_000), drop_count: 1, ..Faults::default() });
    let cache = tmp();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(&format!("{REPO}:Q8_0")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), file(&r, "Model-Q8_0.gguf").data);
    let ranges: Vec<Option<String>> = server
        .content_gets()
        .iter()
        .filter(|q| q.path.starts_with("/blobs/"))
        .map(|q| q.headers.get("range").cloned())
        .collect();
    assert_eq!(ranges, [None, Some("bytes=70000-".to_string())]);
}

#[tokio::test]
async fn interrupted_download_leaves_only_incomplete_and_resumes_later() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    server.set_faults(Faults { drop_after: Some(120_000), drop_count: 1, ..Faults::default() });
    let cache = tmp();
    let mut o = opts(&server, cache.path());
    o.max_retries = 0;
    let hub = Hub::new(o).unwrap_or_else(|e| panic!("{e}"));
    let err = hub.resolve_str(&format!("{REPO}:Q8_0")).await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(matches!(err, HubError::Network { .. }), "{err}");
    let f = file(&r, "Model-Q8_0.gguf");
    assert_nothing_visible(cache.path(), &r, "Model-Q8_0.gguf");
    let incomplete = cache.path().join("models--org--Model-GGUF/blobs").join(format!("{}.incomplete", f.sha256()));
    assert_eq!(std::fs::metadata(&incomplete).map(|m| m.len()).ok(), Some(120_000));

    // A later run resumes from the partial file.
    server.clear_log();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(&format!("{REPO}:Q8_0")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), f.data);
    let gets = server.content_gets();
    let blob_get = gets.iter().find(|q| q.path.starts_with("/blobs/")).unwrap_or_else(|| panic!("no blob GET"));
    assert_eq!(blob_get.headers.get("range").map(String::as_str), Some("bytes=120000-"));
    assert!(!incomplete.exists());
}

#[tokio::test]
async fn checksum_mismatch_rejected_and_nothing_half_visible() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    server.set_faults(Faults { corrupt: true, ..Faults::default() });
    let cache = tmp();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let err = hub.resolve_str(&format!("{REPO}:Q8_0")).await.err().unwrap_or_else(|| panic!("must fail"));
    let f = file(&r, "Model-Q8_0.gguf");
    match &err {
        HubError::Checksum { expected, got, file: name, .. } => {
            assert_eq!(expected, &f.sha256());
            assert_ne!(got, expected);
            assert_eq!(name, "Model-Q8_0.gguf");
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains(&f.sha256()), "{err}");
    assert_nothing_visible(cache.path(), &r, "Model-Q8_0.gguf");
    let blobs = cache.path().join("models--org--Model-GGUF/blobs");
    let left: Vec<_> =
        std::fs::read_dir(&blobs).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "leftovers in blobs/: {left:?}");
}

#[tokio::test]
async fn parallel_ranges_with_drop_and_resume() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let mut o = opts(&server, cache.path());
    o.parallel_min_size = 100_000;
    o.chunk_size = 64 * 1024;
    o.connections = 3;
    o.max_retries = 0;
    // First run: one range request is cut and retries are off, so the download stops part-way.
    // Workers take chunks in order: when the last chunk (offset 4 * 64 KiB) fails, at least two are done.
    server.set_faults(Faults {
        drop_after: Some(10_000),
        drop_count: 1,
        drop_at_offset: Some(4 * 64 * 1024),
        ..Faults::default()
    });
    let hub = Hub::new(o.clone()).unwrap_or_else(|e| panic!("{e}"));
    let err = hub.resolve_str(&format!("{REPO}:Q8_0")).await.err().unwrap_or_else(|| panic!("must fail"));
    assert!(matches!(err, HubError::Network { .. }), "{err}");
    let f = file(&r, "Model-Q8_0.gguf");
    assert_nothing_visible(cache.path(), &r, "Model-Q8_0.gguf");
    let blobs = cache.path().join("models--org--Model-GGUF/blobs");
    assert!(blobs.join(format!("{}.infr-partial", f.sha256())).exists());
    // A sparse partial file never carries huggingface_hub's `.incomplete` name.
    assert!(!blobs.join(format!("{}.incomplete", f.sha256())).exists());

    // Second run: only the missing chunks are fetched, every request is a bounded range.
    server.clear_log();
    o.max_retries = 3;
    let hub = Hub::new(o).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(&format!("{REPO}:Q8_0")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), f.data);
    let ranges: Vec<String> = server
        .content_gets()
        .iter()
        .filter(|q| q.path.starts_with("/blobs/"))
        .map(|q| q.headers.get("range").cloned().unwrap_or_default())
        .collect();
    assert!(ranges.iter().all(|h| h.starts_with("bytes=") && !h.ends_with('-')), "{ranges:?}");
    assert!((1..=3).contains(&ranges.len()), "5 chunks in all, 2+ were already done: {ranges:?}");
    let left: Vec<_> =
        std::fs::read_dir(&blobs).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert_eq!(left.len(), 1, "only the finished blob remains: {left:?}");
}

#[tokio::test]
async fn server_ignoring_range_falls_back_to_one_stream() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    server.set_faults(Faults { ignore_range: true, ..Faults::default() });
    let cache = tmp();
    let mut o = opts(&server, cache.path());
    o.parallel_min_size = 100_000;
    o.chunk_size = 64 * 1024;
    let hub = Hub::new(o).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(&format!("{REPO}:Q8_0")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), file(&r, "Model-Q8_0.gguf").data);
}

#[tokio::test]
async fn retries_503_with_backoff() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    server.set_faults(Faults { fail_503: 2, ..Faults::default() });
    let cache = tmp();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    let got = hub.resolve_str(REPO).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), file(&r, "Model-Q4_K_M.gguf").data);
    assert_eq!(server.content_gets().iter().filter(|q| q.path.starts_with("/blobs/")).count(), 3);
}

#[tokio::test]
async fn stalled_server_times_out_and_slow_server_progresses() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let mut o = opts(&server, cache.path());
    o.read_timeout = Duration::from_millis(300);
    o.max_retries = 1;
    server.set_faults(Faults { stall: Some(Duration::from_secs(3)), ..Faults::default() });
    let hub = Hub::new(o.clone()).unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    let err = hub.resolve_str(REPO).await.err().unwrap_or_else(|| panic!("must time out"));
    assert!(matches!(err, HubError::Network { .. }) && err.to_string().contains("timed out"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(3), "took {:?}", t0.elapsed());
    assert_nothing_visible(cache.path(), &r, "Model-Q4_K_M.gguf");

    // Slow but steady (each pause shorter than the read timeout) completes.
    server.set_faults(Faults { trickle: Some((20_000, Duration::from_millis(30))), ..Faults::default() });
    let got = hub.resolve_str(REPO).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), file(&r, "Model-Q4_K_M.gguf").data);
}

/// Hardening issue, defect 10: a server that trickles bytes, each in time for the read
/// timeout, fails the minimum speed and is given up on after the retries, in bounded time.
#[tokio::test]
async fn trickling_server_fails_the_minimum_speed() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let mut o = opts(&server, cache.path());
    o.read_timeout = Duration::from_secs(2);
    o.min_speed = 50_000;
    o.speed_window = Duration::from_millis(300);
    o.max_retries = 1;
    // 100 bytes every 50 ms: 2 kB/s, never silent for a whole read timeout.
    server.set_faults(Faults { trickle: Some((100, Duration::from_millis(50))), ..Faults::default() });
    let hub = Hub::new(o).unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    let err = hub.resolve_str(REPO).await.err().unwrap_or_else(|| panic!("must give up"));
    assert!(err.to_string().contains("too slow"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
    assert_nothing_visible(cache.path(), &r, "Model-Q4_K_M.gguf");
}

#[tokio::test]
async fn small_git_file_download_and_tree_fallbacks() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let hub = Hub::new(opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    // A non-LFS file: ETag is the git blob sha1, verified as such.
    let p = hub.download_file(REPO, "main", "README.md").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&p), b"# a model\n");
    let link = std::fs::read_link(&p).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(link, Path::new("../../blobs").join(file(&r, "README.md").git_sha1()));

    // Paginated tree listing.
    server.set_faults(Faults { page_size: 2, ..Faults::default() });
    let info = hub.api().repo_info(REPO, "main").await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.files.len(), r.files.len());
    assert!(info.files.iter().any(|f| f.path == "Model-Q8_0.gguf" && f.size == Some(300_000)));
    // A mirror without the tree endpoint: the siblings list still works.
    server.set_faults(Faults { no_tree: true, ..Faults::default() });
    let got = hub.resolve_str(&format!("{REPO}:Q2_K")).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got.paths.len(), 3);
}

#[test]
fn blocking_resolve_from_sync_and_async_contexts() {
    let r = repo();
    let server = MockHub::start(vec![r.clone()]);
    let cache = tmp();
    let got = infr_hub::resolve_blocking(REPO, opts(&server, cache.path())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read(&got.paths[0]), file(&r, "Model-Q4_K_M.gguf").data);
    // Inside a runtime it moves to a helper thread instead of panicking.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let o = opts(&server, cache.path());
    let again = rt.block_on(async { infr_hub::resolve_blocking(REPO, o) }).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.paths, got.paths);
}
