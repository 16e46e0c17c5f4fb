//! Time decode steps of `n` rows (one per sequence) after a short prompt each, on the CPU or
//! (`DEV=vulkan`) the first Vulkan device:
//! `cargo run --release -p infr-engine --example decode_rows -- MODEL.gguf [ROWS] [STEPS]`.
//! `TOPK=k` reads back only each row's k largest logits. With `INFR_PROF_OPS=1` the backend
//! prints its per-op times at exit; `RUST_LOG` sets the log filter
//! (`INFR_VK_PIPELINE_STATS=1` logs each pipeline's registers at info).

use std::time::Instant;

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{Runner, RunnerOptions, StepItem};

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("model path");
    let rows: usize = args.next().map_or(16, |s| s.parse().expect("rows"));
    let steps: usize = args.next().map_or(32, |s| s.parse().expect("steps"));
    infr_core::set_profiling(std::env::var("INFR_PROF_OPS").is_ok_and(|v| v == "1"), false);
    let w = GgufWeights::open(&path).expect("model");
    let model = infr_models::load_model(&w).expect("loads");
    let backend: Box<dyn infr_core::Backend> = if std::env::var("DEV").is_ok_and(|d| d == "vulkan") {
        Box::new(infr_vulkan::VulkanBackend::new(&Default::default()).expect("vulkan"))
    } else {
        Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).expect("cpu"))
    };
    let opts = RunnerOptions { n_ctx: 256, n_seq: rows, ..Default::default() };
    let mut r = Runner::new(model, &w, backend, opts).expect("runner");
    let seqs: Vec<_> = (0..rows).map(|_| r.add_sequence()).collect();
    for (i, &s) in seqs.iter().enumerate() {
        let prompt: Vec<u32> = (0..20).map(|t| (t * 31 + i as u32 * 7) % 1000 + 10).collect();
        r.prefill(s, &prompt, false).expect("prefill");
    }
    let toks: Vec<[u32; 1]> = (0..rows).map(|i| [(i as u32 * 13) % 1000 + 5]).collect();
    // `TOPK=k` reads back each row's k largest logits (as `infr serve` does) instead of whole
    // rows, whose copy to the host otherwise adds to the step time.
    let topk: usize = std::env::var("TOPK").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut run = |n: usize| {
        let t = Instant::now();
        for _ in 0..n {
            let items: Vec<StepItem<'_>> =
                seqs.iter().zip(&toks).map(|(&seq, t)| StepItem { seq, tokens: t, all_logits: false }).collect();
            if topk > 0 {
                r.step_top_k(&items, topk, &[]).expect("step");
            } else {
                r.step(&items).expect("step");
            }
        }
        t.elapsed().as_secs_f64() / n as f64
    };
    // An idle GPU ramps its clocks up over its first second of work: warm up for longer.
    let warm = Instant::now();
    while warm.elapsed().as_secs_f64() < 1.5 {
        run(4);
    }
    let per = run(steps);
    println!("{rows} rows: {:.2} ms per step, {:.1} tokens/s", per * 1e3, rows as f64 / per);
}
