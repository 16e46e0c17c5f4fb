//! Load-test a running OpenAI-compatible server with concurrent streaming chat completions
//! (`--completions`: plain completions of a prompt, where a server's chat parser would refuse a
//! random model's text).
//!
//! ```text
//! cargo run --release -p infr-server --example load -- --url http://127.0.0.1:8080 --clients 16 --max-tokens 64
//! ```
//!
//! After a short warm-up request, runs one client (the single-stream baseline), then `--clients` at once, and prints
//! the aggregate completion tokens per second of each. Exits non-zero if any stream fails or
//! ends without `[DONE]`. `--api-key` (or `INFR_API_KEY`) is sent as a bearer token.

#[path = "../tests/support/load_client.rs"]
mod load_client;

use std::time::Duration;

use load_client::{run, LoadOptions};

fn usage() -> ! {
    eprintln!(
        "usage: load [--url URL] [--clients N] [--max-tokens N] [--api-key KEY] [--timeout SECS] [--no-baseline] [--completions]"
    );
    std::process::exit(2)
}

fn main() {
    let mut opts = LoadOptions {
        url: "http://127.0.0.1:8080".into(),
        clients: 16,
        max_tokens: 64,
        api_key: std::env::var("INFR_API_KEY").ok(),
        timeout: Duration::from_secs(600),
        completions: false,
    };
    let mut baseline = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--url" => opts.url = val(),
            "--clients" => opts.clients = val().parse().unwrap_or_else(|_| usage()),
            "--max-tokens" => opts.max_tokens = val().parse().unwrap_or_else(|_| usage()),
            "--api-key" => opts.api_key = Some(val()),
            "--timeout" => opts.timeout = Duration::from_secs(val().parse().unwrap_or_else(|_| usage())),
            "--no-baseline" => baseline = false,
            "--completions" => opts.completions = true,
            _ => usage(),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let mut ok = true;
    rt.block_on(async {
        // Warm-up (first-use allocations and kernels), not measured.
        let warm = run(&LoadOptions { clients: 1, max_tokens: 4, ..opts.clone() }).await;
        if !warm.all_ok() {
            eprintln!("warm-up request failed: {:?}", warm.results.first().and_then(|r| r.error.clone()));
        }
        let mut runs = Vec::new();
        if baseline && opts.clients != 1 {
            runs.push(LoadOptions { clients: 1, ..opts.clone() });
        }
        runs.push(opts.clone());
        let mut rates = Vec::new();
        for o in runs {
            let report = run(&o).await;
            println!("{}", report.summary());
            for (i, r) in report.results.iter().enumerate() {
                if let Some(e) = &r.error {
                    eprintln!("client {i}: {e}");
                } else if !r.done {
                    eprintln!("client {i}: stream ended without [DONE]");
                }
            }
            ok &= report.all_ok();
            rates.push(report.tokens_per_s());
        }
        if rates.len() == 2 {
            println!("speed-up of {} clients over 1: {:.2}x", opts.clients, rates[1] / rates[0].max(1e-9));
        }
    });
    if !ok {
        std::process::exit(1);
    }
}
