//! `infr synth` files run: the tiny shapes in every quant mix load, prefill and step on the
//! CPU backend with finite logits.

use infr_core::GgufWeights;
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{Runner, RunnerOptions, StepItem};
use infr_models::synth::{self, Shape, SynthPlan, SynthQuant};

/// Write the tiny synth shape `shape` in `quant` with `seed` to a temporary file named by
/// `tag` (unique per test); returns its plan and path.
fn write_tiny(shape: &str, quant: SynthQuant, seed: u64, tag: &str) -> (SynthPlan, std::path::PathBuf) {
    let plan = SynthPlan::new(Shape::by_name(shape).unwrap(), quant, None).unwrap();
    let path = std::env::temp_dir().join(format!("infr-synth-{}-{shape}-{tag}.gguf", std::process::id()));
    synth::write(&plan, seed, &path, &mut |_, _| {}).unwrap();
    (plan, path)
}

/// Write a tiny synth file, prefill 5 tokens and step once; returns the step's logits.
fn run_tiny(shape: &str, quant: SynthQuant, tier: KernelTier) -> Vec<f32> {
    let (plan, path) = write_tiny(shape, quant, 42, &format!("{}-{tier:?}", quant.name()));
    let w = GgufWeights::open(&path).unwrap();
    let model = infr_models::load_model(&w).unwrap();
    let backend = Box::new(CpuBackend::new(CpuOptions { threads: 2, tier }).unwrap());
    let opts = RunnerOptions { n_ctx: 64, ubatch: 512, ..Default::default() };
    let mut r = Runner::new(model, &w, backend, opts).unwrap();
    let nv = r.n_vocab();
    assert_eq!(nv, plan.shape.n_vocab);
    let seq = r.add_sequence();
    let logits = r.prefill(seq, &[1, 2, 300, 4, 5], true).unwrap();
    assert_eq!(logits.len(), 5 * nv);
    let out = r.step(&[StepItem { seq, tokens: &[7], all_logits: false }]).unwrap();
    let last = out.into_iter().next().unwrap();
    assert_eq!(last.len(), nv);
    let what = format!("{shape} {} {tier:?}", quant.name());
    assert!(logits.iter().chain(&last).all(|x| x.is_finite()), "{what}: non-finite logits");
    // Random weights still give distinct logits, not a constant row.
    let (lo, hi) = last.iter().fold((f32::MAX, f32::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(hi - lo > 1e-3, "{what}: flat logits {lo}..{hi}");
    drop(r);
    drop(w);
    let _ = std::fs::remove_file(&path);
    last
}

#[test]
fn synth_tiny_qwen3_runs_on_cpu() {
    for q in SynthQuant::ALL {
        run_tiny("tiny-qwen3", q, KernelTier::Fast);
    }
}

#[test]
fn synth_tiny_llama3_runs_on_cpu() {
    for q in SynthQuant::ALL {
        run_tiny("tiny-llama3", q, KernelTier::Fast);
    }
}

#[test]
fn synth_tiny_hybrid_and_gemma4_shapes_run_on_cpu() {
    for shape in ["tiny-qwen35", "tiny-qwen35moe", "tiny-gemma4", "tiny-gemma4-moe"] {
        for q in [SynthQuant::Q4_K_M, SynthQuant::Q8_0] {
            run_tiny(shape, q, KernelTier::Fast);
        }
    }
}

/// The tiny DiffusionGemma synth file denoises: a seeded generation of two canvases gives
/// tokens inside the vocabulary, the same ones twice.
#[test]
fn synth_tiny_diffusiongemma_generates() {
    let (plan, path) = write_tiny("tiny-diffusiongemma", SynthQuant::Q4_K_M, 42, "generates");
    let w = GgufWeights::open(&path).unwrap();
    let run_ctx = |n_ctx: usize, max_new_tokens: usize| {
        let model = infr_models::load_model(&w).unwrap();
        let mut params = model.diffusion().expect("a diffusion model");
        assert_eq!(params.canvas_length, 32);
        params.max_denoising_steps = 4;
        let backend = Box::new(CpuBackend::new(CpuOptions { threads: 2, tier: KernelTier::Fast }).unwrap());
        let mut r = Runner::new(model, &w, backend, RunnerOptions { n_ctx, ..Default::default() }).unwrap();
        let seq = r.add_sequence();
        let opts = infr_engine::DiffusionOptions { params, max_new_tokens, eos: Vec::new() };
        let mut noise = infr_engine::SeededNoise::new(5);
        infr_engine::generate_diffusion(&mut r, seq, &[1, 2, 3], &opts, &mut noise, |_| true)
    };
    let run = || run_ctx(128, 64).unwrap();
    let (a, b) = (run(), run());
    // Only whole canvases that fit after the prompt: 125 positions hold 3 canvases of 32.
    assert_eq!(run_ctx(128, 1000).unwrap().tokens.len(), 96);
    // Not even one: refused up front.
    assert!(matches!(run_ctx(34, 64), Err(infr_engine::EngineError::ContextFull { .. })));
    assert_eq!(a.steps, [4, 4]);
    assert_eq!(a.tokens.len(), 64);
    assert!(a.tokens.iter().all(|&t| (t as usize) < plan.shape.n_vocab));
    assert_eq!(a.tokens, b.tokens);
    drop(w);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn synth_fast_and_reference_kernels_agree() {
    // Same file on both kernel tiers: the synthetic blocks are valid input for the fast
    // kernels too (they quantize activations, so allow a small relative difference).
    for q in [SynthQuant::Q4_K_M, SynthQuant::Q4_0] {
        let fast = run_tiny("tiny-qwen3", q, KernelTier::Fast);
        let reference = run_tiny("tiny-qwen3", q, KernelTier::Reference);
        let scale = reference.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = fast.iter().zip(&reference).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(diff <= 0.05 * scale, "{}: max diff {diff} vs max |logit| {scale}", q.name());
    }
}

/// A CPU backend that claims not to run one op: stands in for a device that lacks a kernel.
struct WithoutOp(CpuBackend, &'static str);

impl infr_core::Backend for WithoutOp {
    fn device(&self) -> &infr_core::DeviceInfo {
        self.0.device()
    }
    fn supports(&self, node: &infr_core::Node) -> Result<(), String> {
        if node.op.name() == self.1 {
            return Err("no kernel for it on this test device".into());
        }
        self.0.supports(node)
    }
    fn load_weight(
        &mut self,
        id: infr_core::WeightId,
        w: &infr_core::WeightData,
    ) -> Result<(), infr_core::BackendError> {
        panic!("weight {} uploaded although the model needs an unsupported op ({})", id.0, w.name)
    }
    fn init_kv(&mut self, spec: &infr_core::KvSpec) -> Result<(), infr_core::BackendError> {
        self.0.init_kv(spec)
    }
    fn compile(&mut self, g: &infr_core::Graph) -> Result<infr_core::PlanId, infr_core::BackendError> {
        self.0.compile(g)
    }
    fn execute(
        &mut self,
        plan: infr_core::PlanId,
        inputs: &infr_core::StepInputs<'_>,
    ) -> Result<Vec<f32>, infr_core::BackendError> {
        self.0.execute(plan, inputs)
    }
    fn copy_kv_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), infr_core::BackendError> {
        self.0.copy_kv_pages(pairs)
    }
}

/// The message of `Runner::new`'s error for the tiny Qwen3 synth model on `backend` with
/// `opts` (the runner must refuse it).
fn refusal(tag: &str, backend: Box<dyn infr_core::Backend>, opts: RunnerOptions) -> String {
    let (_, path) = write_tiny("tiny-qwen3", SynthQuant::Q4_0, 7, tag);
    let w = GgufWeights::open(&path).unwrap();
    let model = infr_models::load_model(&w).unwrap();
    let msg = Runner::new(model, &w, backend, opts).err().expect("the runner must refuse the model").to_string();
    drop(w);
    let _ = std::fs::remove_file(&path);
    msg
}

#[test]
fn a_model_needing_an_unsupported_op_is_refused_up_front() {
    let cpu = CpuBackend::new(CpuOptions { threads: 1, tier: KernelTier::Fast }).unwrap();
    let opts = RunnerOptions { n_ctx: 64, ..Default::default() };
    let msg = refusal("unsupported", Box::new(WithoutOp(cpu, "glu")), opts);
    assert!(msg.contains("'glu'") && msg.contains("blk.0") && msg.contains("CPU"), "{msg}");
}

/// Hardening issue, defect 2: a context far beyond memory is refused with the numbers before
/// anything is allocated, instead of aborting the process in the allocator.
#[test]
fn a_context_that_cannot_fit_is_refused_with_numbers() {
    let cpu = Box::new(CpuBackend::new(CpuOptions { threads: 1, tier: KernelTier::Fast }).unwrap());
    let opts = RunnerOptions { n_ctx: i32::MAX as usize, ..Default::default() };
    let msg = refusal("hugectx", cpu, opts);
    assert!(msg.contains("MiB available") && msg.contains("--ctx-size") && msg.contains("2147483647"), "{msg}");
}

/// A step submitted with `submit_step_top_k` and waited for after other work that needs the
/// device (another sequence's prefill) gives the candidates of the plain `step_top_k`, on the
/// CPU and on Vulkan (where the submission returns before the step finishes).
#[test]
fn submitted_steps_give_the_same_candidates() {
    let (_, path) = write_tiny("tiny-qwen3", SynthQuant::Q4_K_M, 7, "submit");
    let w = GgufWeights::open(&path).unwrap();
    let mut backends: Vec<Box<dyn infr_core::Backend>> =
        vec![Box::new(CpuBackend::new(CpuOptions { threads: 2, tier: KernelTier::Fast }).unwrap())];
    match infr_vulkan::VulkanBackend::new(&infr_vulkan::VulkanOptions::default()) {
        Ok(vk) => backends.push(Box::new(vk)),
        Err(e) => assert!(std::env::var("INFR_REQUIRE_VULKAN").is_err(), "no Vulkan device: {e}"),
    }
    for backend in backends {
        let dev = backend.device().id.clone();
        let model = infr_models::load_model(&w).unwrap();
        let opts = RunnerOptions { n_ctx: 64, n_seq: 3, ubatch: 64, ..Default::default() };
        let mut r = Runner::new(model, &w, backend, opts).unwrap();
        let (a, b, c) = (r.add_sequence(), r.add_sequence(), r.add_sequence());
        r.prefill(a, &[1, 2, 300, 4, 5], false).unwrap();
        r.prefill(b, &[1, 2, 300, 4, 5], false).unwrap();
        let items = |s| [StepItem { seq: s, tokens: &[7, 8], all_logits: true }];
        let want = r.step_top_k(&items(a), 8, &[]).unwrap();
        let pending = r.submit_step_top_k(&items(b), 8, &[]).unwrap();
        r.prefill(c, &[9, 10, 11], false).unwrap();
        let got = r.wait_step(pending).unwrap();
        assert_eq!(got, want, "{dev}");
        assert_eq!(got[0].len(), 2, "{dev}: one candidate list per output row");
    }
    drop(w);
    let _ = std::fs::remove_file(&path);
}
