//! Load test on loopback: a server with 16 slots (smollm2 on the CPU) and 16 concurrent
//! streaming clients. Asserts that every stream completes with `[DONE]` and usage (none lost)
//! and prints the aggregate completion tokens/s of 1 client and of 16; speed is reported, not
//! asserted. The whole test is bounded (it fails rather than hangs past its deadline).
//!
//! The same client runs standalone against any server: `cargo run --release -p infr-server
//! --example load -- --url http://127.0.0.1:8080 --clients 16 --max-tokens 64`.

use crate::load_client;
use crate::server;

use std::time::Duration;

use load_client::{run, LoadOptions};

const MODEL: &str = "smollm2-135m-instruct-q4_1";
const PARALLEL: usize = 16;
const MAX_TOKENS: usize = 32;
/// The whole test's time limit.
const DEADLINE: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_streaming_clients() {
    // 16 slots of 256 tokens on 127.0.0.1.
    let Some(url) = server::start_server_with(MODEL, PARALLEL, PARALLEL * 256, None) else { return };
    let opts =
        LoadOptions { url, clients: 1, max_tokens: MAX_TOKENS, api_key: None, timeout: DEADLINE, completions: false };
    let body = async {
        // Warm-up (first-use allocations), then 1 client, then 16.
        let warm = run(&opts).await;
        assert!(warm.all_ok(), "{:?}", warm.results);
        let one = run(&opts).await;
        let many = run(&LoadOptions { clients: PARALLEL, ..opts.clone() }).await;
        let plain = run(&LoadOptions { clients: PARALLEL, completions: true, ..opts.clone() }).await;
        (one, many, plain)
    };
    let (one, many, plain) = tokio::time::timeout(DEADLINE, body).await.expect("load test finished in time");
    println!("1 client:  {}", one.summary());
    println!("{PARALLEL} clients: {}", many.summary());
    println!(
        "aggregate completion tokens/s: 1 client {:.1}, {PARALLEL} clients {:.1} ({:.2}x)",
        one.tokens_per_s(),
        many.tokens_per_s(),
        many.tokens_per_s() / one.tokens_per_s().max(1e-9)
    );
    println!("{PARALLEL} clients, plain completions: {}", plain.summary());
    assert!(one.all_ok(), "{:?}", one.results);
    for report in [&many, &plain] {
        for (i, r) in report.results.iter().enumerate() {
            assert!(r.error.is_none(), "client {i}: {:?}", r.error);
            assert!(r.done, "client {i}: stream ended without [DONE]");
            assert!((1..=MAX_TOKENS).contains(&r.completion_tokens), "client {i}: {} tokens", r.completion_tokens);
            assert!(!r.text.is_empty(), "client {i}: no text");
        }
        assert_eq!(report.results.len(), PARALLEL);
    }
}
