//! Shared test harness: open the Vulkan backend (with validation when installed), a CPU
//! reference backend, random weights of every type, graph execution on both, comparisons.

use infr_core::{
    Backend, Graph, GraphBuilder, KvDType, KvLayerSpec, KvSpec, SeqPages, StepInputs, TensorId, WeightData, WeightId,
    WeightInfo,
};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_gguf::TensorData;
use infr_quant::GgmlType;
use infr_vulkan::{VulkanBackend, VulkanOptions};

/// Open lavapipe (or whatever `VK_LOADER_DRIVERS_SELECT` picks); `None` skips the test unless
/// `INFR_REQUIRE_VULKAN=1`, which turns a missing device into a failure.
pub fn vulkan() -> Option<VulkanBackend> {
    vulkan_with(VulkanOptions { validation: true, ..Default::default() })
}

/// Options with validation and per-dispatch profiling on, and fused kernels on or off.
pub fn profiled(fused: bool) -> VulkanOptions {
    VulkanOptions { validation: true, profile: true, disable_fusion: !fused, ..Default::default() }
}

/// [`vulkan`] with explicit options.
pub fn vulkan_with(opts: VulkanOptions) -> Option<VulkanBackend> {
    match VulkanBackend::new(&opts) {
        Ok(b) => {
            // Set where the driver is known to offer cooperative matrices (CI runs the suite
            // once more on such a lavapipe), so that those kernels cannot silently go unused.
            let want_coop = !opts.disable_coopmat && !opts.portable_kernels;
            if want_coop && std::env::var("INFR_REQUIRE_COOPMAT").is_ok_and(|v| v == "1") {
                assert!(b.uses_coopmat(), "INFR_REQUIRE_COOPMAT=1 but the cooperative-matrix kernels are off");
            }
            Some(b)
        }
        Err(e) => {
            if std::env::var("INFR_REQUIRE_VULKAN").is_ok_and(|v| v == "1") {
                panic!("INFR_REQUIRE_VULKAN=1 but no Vulkan device: {e}");
            }
            eprintln!("skipping: no Vulkan device ({e})");
            None
        }
    }
}

/// `rows` less those whose matmuls take no cooperative-matrix kernel on `vk`, when
/// `INFR_PARITY_COOP_ROWS_ONLY=1` (`scripts/test.sh` sets it for its second pass on a lavapipe
/// with cooperative matrices, after the first pass ran every row count on kernels without
/// them); all of `rows` otherwise.
pub fn coop_rows_only(vk: &VulkanBackend, rows: &[usize]) -> Vec<usize> {
    match vk.f16_min_rows() {
        Some(from) if coop_pass() => rows.iter().copied().filter(|&n| n >= from).collect(),
        _ => rows.to_vec(),
    }
}

/// Whether this is `scripts/test.sh`'s second pass, on cooperative matrices only
/// (`INFR_PARITY_COOP_ROWS_ONLY=1`).
pub fn coop_pass() -> bool {
    std::env::var("INFR_PARITY_COOP_ROWS_ONLY").is_ok_and(|v| v == "1")
}

/// Whether the cooperative kernels of weight type `ty` run code of their own on the second
/// pass ([`coop_pass`]): Q4_K and Q6_K stage raw units (`deq16_k.wgsl`); every other type
/// stages through the shared loader (`deq16_generic.wgsl`) calling the `deq4_*` the first
/// pass already checked in the other kernels, so one type of each dequantizer family stands
/// for the rest (legacy nibbles, signed bytes, k-quant crumbs and high bits, a grid table, a
/// shared exponent, plain floats). All types on the first pass and without the variable.
pub fn coop_loader_differs(ty: GgmlType) -> bool {
    use GgmlType::*;
    !coop_pass() || matches!(ty, Q4_K | Q6_K | Q4_0 | Q8_0 | Q2_K | Q5_K | IQ4_XS | MXFP4 | F16 | BF16 | F32)
}

/// Fail on anything the validation layer reported.
pub fn assert_clean(vk: &VulkanBackend) {
    let msgs = vk.take_validation_messages();
    assert!(msgs.is_empty(), "validation layer reported:\n{}", msgs.join("\n"));
}

/// The reference CPU backend.
pub fn cpu() -> CpuBackend {
    CpuBackend::new(CpuOptions { threads: 1, tier: KernelTier::Reference }).expect("cpu backend")
}

/// Deterministic xorshift random numbers.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }

    /// Uniform in [-1, 1).
    pub fn f(&mut self) -> f32 {
        (self.next_u32() as f32 / u32::MAX as f32) * 2.0 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f() * scale).collect()
    }
}

fn put_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes());
}

/// Random valid blocks for types without a quantizer: random quant bits, sane scales.
fn random_blocks(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    use infr_quant::blocks::*;
    let info = ty.info();
    let nb = n / info.block_size;
    let mut out = vec![0u8; nb * info.type_size];
    for b in out.iter_mut() {
        *b = rng.next_u32() as u8;
    }
    for blk in out.chunks_exact_mut(info.type_size) {
        let d = 0.01 + 0.01 * rng.f().abs();
        match ty {
            GgmlType::IQ2_XXS => put_f16(blk, BlockIQ2_XXS::OFF_D, d),
            GgmlType::IQ2_XS => put_f16(blk, BlockIQ2_XS::OFF_D, d),
            GgmlType::IQ2_S => put_f16(blk, BlockIQ2_S::OFF_D, d),
            GgmlType::IQ3_XXS => put_f16(blk, BlockIQ3_XXS::OFF_D, d),
            GgmlType::IQ3_S => put_f16(blk, BlockIQ3_S::OFF_D, d),
            GgmlType::IQ1_S => put_f16(blk, BlockIQ1_S::OFF_D, d),
            GgmlType::IQ1_M => {
                // f16 0x2000 scattered over the top nibbles of the four scale words.
                let s = BlockIQ1_M::OFF_SCALES;
                for i in 0..4 {
                    blk[s + 2 * i + 1] &= 0x0f;
                }
                blk[s + 7] |= 0x20;
            }
            _ => panic!("no random blocks for {ty}"),
        }
    }
    out
}

/// A weight of `ty` with ggml dims `[cols, rows]` from random values (quantized when a
/// quantizer exists, else random valid blocks).
pub fn weight(name: &str, ty: GgmlType, cols: usize, rows: usize, rng: &mut Rng, scale: f32) -> WeightData {
    let n = cols * rows;
    let bytes = if infr_quant::can_quantize(ty) {
        infr_quant::quantize(ty, &rng.vec(n, scale)).expect("quantize")
    } else {
        random_blocks(ty, n, rng)
    };
    let dims = if rows == 1 { vec![cols] } else { vec![cols, rows] };
    WeightData { name: name.into(), info: WeightInfo { ty, dims }, bytes: TensorData::from_vec(bytes) }
}

/// The weights as f32 (reference dequantization).
pub fn dequant(w: &WeightData) -> Vec<f32> {
    infr_quant::dequantize_to_vec(w.info.ty, &w.bytes).expect("dequantize")
}

/// Every weight type the Vulkan backend runs.
pub fn all_types() -> Vec<GgmlType> {
    GgmlType::ALL.into_iter().filter(|&t| infr_vulkan::repack::gpu_layout(t).is_some()).collect()
}

/// Weights for a test graph, loaded into several backends.
#[derive(Default)]
pub struct Weights {
    pub list: Vec<WeightData>,
}

impl Weights {
    pub fn add(&mut self, w: WeightData) -> WeightId {
        self.list.push(w);
        WeightId(self.list.len() as u32 - 1)
    }

    pub fn shape(&self, id: WeightId) -> Vec<usize> {
        self.list[id.0 as usize].info.dims.clone()
    }

    pub fn load(&self, b: &mut dyn Backend) {
        for (i, w) in self.list.iter().enumerate() {
            b.load_weight(WeightId(i as u32), w).expect("load weight");
        }
    }
}

/// Build a graph with `f` over `n_tokens` tokens and `n_out` outputs.
pub fn graph(w: &Weights, n_tokens: usize, n_out: usize, f: impl FnOnce(&mut GraphBuilder<'_>) -> TensorId) -> Graph {
    let shape = |id: WeightId| w.shape(id);
    let mut g = GraphBuilder::new(n_tokens, n_out, &shape);
    f(&mut g);
    g.finish()
}

/// One sequence per step (pages given), positions from `start`.
pub struct Step {
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
    pub token_seq: Vec<u32>,
    pub seqs: Vec<Vec<u32>>,
    pub output_rows: Vec<u32>,
    /// `StepInputs::embed_mix` (empty for none).
    pub embed_mix: Vec<f32>,
    /// `StepInputs::hidden` (empty for none).
    pub hidden: Vec<f32>,
}

impl Step {
    pub fn simple(tokens: Vec<u32>, start: u32, pages: Vec<u32>) -> Self {
        let n = tokens.len() as u32;
        Self {
            positions: (start..start + n).collect(),
            token_seq: vec![0; n as usize],
            seqs: vec![pages],
            output_rows: (0..n).collect(),
            tokens,
            embed_mix: Vec::new(),
            hidden: Vec::new(),
        }
    }

    /// The step as backend inputs, for `f`.
    pub fn with_inputs<T>(&self, f: impl FnOnce(&StepInputs<'_>) -> T) -> T {
        let seqs: Vec<SeqPages<'_>> = self
            .seqs
            .iter()
            .enumerate()
            .map(|(i, p)| SeqPages { pages: p, window_pages: p, state_slot: i as u32 })
            .collect();
        f(&StepInputs {
            tokens: &self.tokens,
            positions: &self.positions,
            token_seq: &self.token_seq,
            seqs: &seqs,
            output_rows: &self.output_rows,
            embed_mix: &self.embed_mix,
            hidden: &self.hidden,
        })
    }

    pub fn run(&self, b: &mut dyn Backend, plan: infr_core::PlanId) -> Vec<f32> {
        self.with_inputs(|inp| b.execute(plan, inp).expect("execute"))
    }

    pub fn run_canvas(
        &self,
        b: &mut dyn Backend,
        plan: infr_core::PlanId,
        s: &infr_core::CanvasSampleInputs<'_>,
    ) -> Result<Vec<infr_core::CanvasDraw>, infr_core::BackendError> {
        self.with_inputs(|inp| b.execute_canvas_sample(plan, inp, s))
    }

    pub fn run_top_k(&self, b: &mut dyn Backend, plan: infr_core::PlanId, k: usize) -> Vec<Vec<(u32, f32)>> {
        self.run_top_k_adjusted(b, plan, k, &[]).expect("execute_top_k")
    }

    /// [`Step::run_top_k`] after per-row logit adjustments.
    pub fn run_top_k_adjusted(
        &self,
        b: &mut dyn Backend,
        plan: infr_core::PlanId,
        k: usize,
        adjust: &[Vec<infr_core::LogitAdjust>],
    ) -> Result<Vec<Vec<(u32, f32)>>, infr_core::BackendError> {
        self.with_inputs(|inp| b.execute_top_k(plan, inp, k, adjust))
    }
}

/// A small KV cache spec.
pub fn kv_spec(
    layers: usize,
    n_kv_head: u32,
    dk: u32,
    dv: u32,
    n_pages: u32,
    page_size: u32,
    dtype: KvDType,
) -> KvSpec {
    KvSpec {
        layers: vec![KvLayerSpec { n_kv_head, head_dim_k: dk, head_dim_v: dv, window: None }; layers],
        n_pages,
        page_size,
        dtype,
        n_window_pages: n_pages,
        states: Vec::new(),
        n_state_slots: 0,
    }
}

/// Max |a-b| and max |b|.
pub fn max_err(a: &[f32], b: &[f32]) -> (f32, f32) {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut e = 0f32;
    let mut m = 0f32;
    for (x, y) in a.iter().zip(b) {
        assert!(x.is_finite(), "non-finite GPU value {x}");
        e = e.max((x - y).abs());
        m = m.max(y.abs());
    }
    (e, m)
}

/// Assert `a ≈ b` within `atol + rtol * max|b|`.
pub fn assert_close(what: &str, a: &[f32], b: &[f32], atol: f32, rtol: f32) {
    let (e, m) = max_err(a, b);
    eprintln!("parity {what}: max err {e:.3e}, max |ref| {m:.3e}, rel {:.3e}", e / m.max(1e-30));
    assert!(e <= atol + rtol * m, "{what}: max error {e} (max |ref| {m}, allowed {})", atol + rtol * m);
}

/// Run the same graph on Vulkan and CPU for each step and compare every output.
pub struct Pair {
    pub vk: VulkanBackend,
    pub cpu: CpuBackend,
}

impl Pair {
    pub fn new(w: &Weights, kv: &KvSpec) -> Option<Self> {
        Self::with(w, kv, VulkanOptions { validation: true, ..Default::default() })
    }

    pub fn with(w: &Weights, kv: &KvSpec, opts: VulkanOptions) -> Option<Self> {
        let mut vk = vulkan_with(opts)?;
        let mut cpu = cpu();
        w.load(&mut vk);
        w.load(&mut cpu);
        vk.init_kv(kv).unwrap();
        cpu.init_kv(kv).unwrap();
        Some(Self { vk, cpu })
    }

    pub fn check(&mut self, what: &str, g: &Graph, steps: &[Step], atol: f32, rtol: f32) {
        let pv = self.vk.compile(g).unwrap();
        let pc = self.cpu.compile(g).unwrap();
        for (i, s) in steps.iter().enumerate() {
            let a = s.run(&mut self.vk, pv);
            let b = s.run(&mut self.cpu, pc);
            assert_close(&format!("{what} step {i}"), &a, &b, atol, rtol);
        }
        assert_clean(&self.vk);
    }
}
