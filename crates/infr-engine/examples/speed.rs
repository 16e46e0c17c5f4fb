//! Quick prefill/decode timing on the CPU backend: `cargo run --release --example speed -- MODEL [PP] [TG]`.
use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions};
use infr_engine::{Runner, RunnerOptions, StepItem};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let pp: usize = a.get(2).map_or(512, |s| s.parse().unwrap());
    let tg: usize = a.get(3).map_or(64, |s| s.parse().unwrap());
    let w = GgufWeights::open(&a[1]).unwrap();
    let m = infr_models::load_model(&w).unwrap();
    let b = Box::new(CpuBackend::new(CpuOptions::default()).unwrap());
    let mut r = Runner::new(m, &w, b, RunnerOptions { n_ctx: pp + tg + 8, ..Default::default() }).unwrap();
    let nv = r.n_vocab() as u32;
    let toks: Vec<u32> = (0..pp as u32).map(|i| (i * 7919 + 13) % nv).collect();
    let s = r.add_sequence();
    let t = Instant::now();
    r.prefill(s, &toks, false).unwrap();
    let dt = t.elapsed().as_secs_f64();
    println!("pp{pp}: {:.1} t/s", pp as f64 / dt);
    let t = Instant::now();
    for i in 0..tg {
        r.step(&[StepItem { seq: s, tokens: &[(i as u32 * 31) % nv], all_logits: false }]).unwrap();
    }
    println!("tg{tg}: {:.1} t/s", tg as f64 / t.elapsed().as_secs_f64());
}
