//! Bounded plans: a server builds every step plan at start (the shape ladder), so serving 200
//! requests of random prompt lengths builds none on the request path and device memory after
//! warm-up stays flat (Vulkan on lavapipe; the CPU as well).

mod common;

use std::time::Duration;

use infr_core::{Backend, GgufWeights};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{
    slot_runner_options, Event, Request, Runner, RunnerOptions, Scheduler, SchedulerHandle, SchedulerOptions,
};

fn serve(backend: Box<dyn Backend>) -> SchedulerHandle {
    let w = GgufWeights::open(common::repo().join("testdata/oracle/synth/qwen3.gguf")).unwrap();
    let model = infr_models::load_model(&w).unwrap();
    let ro = slot_runner_options(2 * 256, 2, RunnerOptions { ubatch: 64, page_size: 16, ..Default::default() });
    let runner = Runner::new(model, &w, backend, ro).unwrap();
    Scheduler::spawn(runner, SchedulerOptions::default()).unwrap()
}

/// A tiny deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Run `n` requests, two at a time, with prompts of 1 to 200 random tokens.
fn run_requests(h: &SchedulerHandle, rng: &mut Rng, n: usize) {
    for _ in 0..n / 2 {
        let rxs: Vec<_> = (0..2)
            .map(|_| {
                let len = 1 + rng.below(200) as usize;
                let prompt: Vec<u32> = (0..len).map(|_| rng.below(49000) as u32 + 100).collect();
                let req = Request { max_tokens: Some(1 + rng.below(4) as usize), ..Request::new(prompt, vec![]) };
                h.submit_channel(req).expect("submitted")
            })
            .collect();
        for rx in rxs {
            loop {
                match rx.recv_timeout(Duration::from_secs(120)).expect("event") {
                    Event::Done(_) => break,
                    Event::Error(e) => panic!("request failed: {e}"),
                    _ => {}
                }
            }
        }
    }
}

fn memory_stays_flat(backend: Box<dyn Backend>, what: &str, require_memory: bool) {
    let h = serve(backend);
    let start = h.stats();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    run_requests(&h, &mut rng, 10);
    let warm = h.stats();
    run_requests(&h, &mut rng, 200);
    let end = h.stats();
    eprintln!(
        "{what}: {} plans built at start; {} steps; free memory after warm-up {:?}, after 200 more requests {:?}",
        start.plans_built, end.steps, warm.memory_available, end.memory_available
    );
    assert_eq!(end.plans_built, start.plans_built, "{what}: a plan was built on the request path");
    if require_memory {
        assert!(warm.memory_available.is_some(), "{what}: the backend reports no memory");
        assert_eq!(end.memory_available, warm.memory_available, "{what}: memory grew while serving");
    }
}

#[test]
fn no_plan_builds_and_flat_memory_on_vulkan() {
    if let Some(b) = common::vulkan() {
        memory_stays_flat(b, "Vulkan", true);
    }
}

#[test]
fn no_plan_builds_on_cpu() {
    let b = Box::new(CpuBackend::new(CpuOptions { threads: 0, tier: KernelTier::Fast }).unwrap());
    memory_stays_flat(b, "CPU", false);
}
