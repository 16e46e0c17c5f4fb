//! `CpuBackend`: weights in place (memory-mapped GGUF blocks), a host KV cache, and an
//! interpreter over graph nodes.

use std::collections::HashMap;

use infr_core::{
    prof_enabled, Backend, BackendError, DeviceInfo, GgmlType, Graph, KvSpec, PlanId, Profile, ProfileOnDrop,
    StepInputs, WeightData, WeightId,
};
use infr_gguf::TensorData;

use crate::kv::KvCache;
use crate::matmul::KernelTier;
use crate::plan::Plan;

/// A weight as the CPU uses it: ggml blocks in place, plus an f32 copy of small vectors
/// (norm weights, biases, RoPE factors).
#[derive(Debug)]
pub(crate) struct CpuWeight {
    pub ty: GgmlType,
    /// Elements per row (`dims[0]`).
    pub cols: usize,
    /// Rows (product of the other dims).
    pub rows: usize,
    pub row_bytes: usize,
    pub bytes: TensorData,
    /// Dequantized values for 1-D weights.
    pub f32: Option<Vec<f32>>,
    /// The same matrix in a 16-row interleaved layout, when this CPU has kernels for it.
    pub packed: Option<crate::simd::pack::PackedWeight>,
    /// For a 3-D expert weight `{cols, rows, n_expert}`: one view per expert on the same
    /// bytes (no copy), each `rows` rows.
    pub experts: Vec<CpuWeight>,
}

impl CpuWeight {
    /// A weight of `rows` rows of `cols` values, in its GGUF blocks.
    pub(crate) fn new(ty: GgmlType, cols: usize, rows: usize, bytes: TensorData, f32: Option<Vec<f32>>) -> Self {
        let row_bytes = ty.row_bytes(cols).unwrap_or(0);
        Self { ty, cols, rows, row_bytes, bytes, f32, packed: None, experts: Vec::new() }
    }

    /// Split a 3-D weight into per-expert views of `rows_per_expert` rows each.
    pub(crate) fn with_experts(mut self, n_expert: usize) -> Self {
        let per = self.rows / n_expert;
        self.experts = (0..n_expert)
            .map(|e| {
                let bytes = self.bytes.slice(e * per * self.row_bytes..(e + 1) * per * self.row_bytes);
                CpuWeight::new(self.ty, self.cols, per, bytes, None)
            })
            .collect();
        self
    }

    /// Repack a matmul weight for the 16-row kernels if this CPU has them for its type
    /// (once; the original blocks stay for embedding lookups and the reference kernels).
    pub(crate) fn pack_for_matmul(&mut self) {
        if self.packed.is_none() && self.f32.is_none() && crate::simd::packs(self.ty) {
            self.packed = crate::simd::pack::pack(self.ty, &self.bytes, self.rows, self.row_bytes);
        }
    }
}

/// The matrices a mixture-of-experts op multiplies with (expert tensors and shared expert).
pub(crate) fn moe_matrices(p: &infr_core::MoeParams) -> Vec<WeightId> {
    let mut ids = match p.gate_up {
        infr_core::ExpertGateUp::Separate { gate, up } => vec![gate, up],
        infr_core::ExpertGateUp::Fused(gu) => vec![gu],
    };
    ids.push(p.down);
    if let Some(sh) = &p.shared {
        ids.extend([sh.gate, sh.up, sh.down]);
    }
    ids
}

/// Options for the CPU backend.
#[derive(Debug, Clone, Copy)]
pub struct CpuOptions {
    /// Worker threads (0 = all cores).
    pub threads: usize,
    /// Kernel tier.
    pub tier: KernelTier,
}

impl Default for CpuOptions {
    fn default() -> Self {
        Self { threads: 0, tier: KernelTier::Fast }
    }
}

/// Most worker threads per core the CPU backend starts (`-t` beyond is capped, with a warning).
pub const MAX_THREADS_PER_CORE: usize = 4;

/// The CPU backend.
pub struct CpuBackend {
    info: DeviceInfo,
    pub(crate) weights: HashMap<WeightId, CpuWeight>,
    pub(crate) kv: Option<KvCache>,
    plans: Vec<Plan>,
    pool: rayon::ThreadPool,
    pub(crate) tier: KernelTier,
    prof: Option<ProfileOnDrop>,
}

/// Features of this CPU relevant to our kernels, detected at run time.
fn cpu_features() -> Vec<String> {
    let mut f = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            f.push("avx2".to_owned());
        }
        if std::arch::is_x86_feature_detected!("fma") {
            f.push("fma".to_owned());
        }
        if std::arch::is_x86_feature_detected!("f16c") {
            f.push("f16c".to_owned());
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            f.push("avx512f".to_owned());
        }
        if std::arch::is_x86_feature_detected!("avx512vnni") {
            f.push("avx512vnni".to_owned());
        }
        if std::arch::is_x86_feature_detected!("avxvnni") {
            f.push("avxvnni".to_owned());
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        f.push("neon".to_owned());
    }
    f.push(format!("matmul kernels {}", crate::simd::describe()));
    f
}

/// A `/proc/meminfo` field in bytes (Linux), if readable.
use infr_core::host_meminfo_bytes as meminfo_bytes;

fn host_memory_bytes() -> u64 {
    meminfo_bytes("MemTotal").unwrap_or(0)
}

impl CpuBackend {
    /// A CPU backend with its own thread pool.
    pub fn new(opts: CpuOptions) -> Result<Self, BackendError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = match opts.threads {
            0 => cores,
            // More threads than this only contend for the cores (and thousands exhaust the
            // process's thread limit).
            t if t > MAX_THREADS_PER_CORE * cores => {
                tracing::warn!("{t} threads asked for on {cores} cores: using {}", MAX_THREADS_PER_CORE * cores);
                MAX_THREADS_PER_CORE * cores
            }
            t => t,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("infr-cpu-{i}"))
            .build()
            .map_err(|e| BackendError::Device(e.to_string()))?;
        let mut features = cpu_features();
        features.push(format!("threads {threads}"));
        features.push(format!("kernels {:?}", opts.tier).to_lowercase());
        let info = DeviceInfo {
            id: "CPU".into(),
            name: std::env::consts::ARCH.to_owned(),
            memory_bytes: host_memory_bytes(),
            features,
        };
        let prof = prof_enabled().then(|| ProfileOnDrop(std::sync::Mutex::new(Profile::new("cpu"))));
        Ok(Self { info, weights: HashMap::new(), kv: None, plans: Vec::new(), pool, tier: opts.tier, prof })
    }

    /// Information about the host CPU without building a backend.
    pub fn describe() -> DeviceInfo {
        DeviceInfo {
            id: "CPU".into(),
            name: std::env::consts::ARCH.to_owned(),
            memory_bytes: host_memory_bytes(),
            features: cpu_features(),
        }
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory_available(&self) -> Option<u64> {
        meminfo_bytes("MemAvailable")
    }

    fn load_weight(&mut self, id: WeightId, w: &WeightData) -> Result<(), BackendError> {
        let cols = w.info.dims[0];
        let rows: usize = w.info.dims.iter().skip(1).product();
        let row_bytes = w.info.ty.row_bytes(cols).ok_or_else(|| {
            BackendError::InvalidInput(format!("{}: row of {cols} is not block aligned for {}", w.name, w.info.ty))
        })?;
        if row_bytes * rows != w.bytes.len() {
            return Err(BackendError::InvalidInput(format!("{}: byte size does not match its shape", w.name)));
        }
        let unsupported = |what: String| BackendError::Unsupported { backend: "cpu".into(), what };
        let f32 = if rows == 1 {
            let mut v = vec![0f32; cols];
            infr_quant::dequantize(w.info.ty, &w.bytes, &mut v).map_err(|e| unsupported(format!("{}: {e}", w.name)))?;
            Some(v)
        } else {
            // Check once that the type can be dequantized at all.
            let mut probe = vec![0f32; cols];
            infr_quant::dequantize(w.info.ty, &w.bytes[..row_bytes], &mut probe)
                .map_err(|e| unsupported(format!("{}: {e}", w.name)))?;
            None
        };
        let bytes = w.bytes.clone();
        let mut cw = CpuWeight::new(w.info.ty, cols, rows, bytes, f32);
        if let [_, _, n_expert] = w.info.dims[..] {
            if n_expert > 1 {
                cw = cw.with_experts(n_expert);
            }
        }
        self.weights.insert(id, cw);
        Ok(())
    }

    fn init_kv(&mut self, spec: &KvSpec) -> Result<(), BackendError> {
        self.kv = None;
        self.kv = Some(KvCache::new(spec)?);
        Ok(())
    }

    fn compile(&mut self, graph: &Graph) -> Result<PlanId, BackendError> {
        let plan = Plan::compile(graph, &self.weights)?;
        if self.tier == KernelTier::Fast {
            let weights = &mut self.weights;
            self.pool.install(|| {
                for node in &graph.nodes {
                    let ids = match &node.op {
                        infr_core::Op::Linear { weight, .. } => vec![*weight],
                        infr_core::Op::Moe { params: p, .. } => moe_matrices(p),
                        _ => Vec::new(),
                    };
                    for id in ids {
                        if let Some(w) = weights.get_mut(&id) {
                            w.pack_for_matmul();
                            w.experts.iter_mut().for_each(CpuWeight::pack_for_matmul);
                        }
                    }
                }
            });
        }
        self.plans.push(plan);
        Ok(PlanId(self.plans.len() as u32 - 1))
    }

    fn execute(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<Vec<f32>, BackendError> {
        let plan = self.plans.get(plan.0 as usize).ok_or_else(|| BackendError::InvalidInput("unknown plan".into()))?;
        let kv = self.kv.as_mut().ok_or_else(|| BackendError::InvalidInput("KV cache not initialised".into()))?;
        let (weights, tier) = (&self.weights, self.tier);
        let prof = self.prof.as_ref().map(|p| &p.0);
        self.pool.install(|| plan.execute(weights, kv, tier, inputs, prof))
    }

    fn copy_kv_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        self.kv.as_mut().ok_or_else(|| BackendError::InvalidInput("KV cache not initialised".into()))?.copy_pages(pairs)
    }

    fn copy_state(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        let kv = self.kv.as_mut().ok_or_else(|| BackendError::InvalidInput("KV cache not initialised".into()))?;
        kv.state.copy_slots(pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hardening issue, defect 11: `-t 100000` is capped instead of spawning that many threads.
    #[test]
    fn thread_count_is_capped() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let b = CpuBackend::new(CpuOptions { threads: 100_000, tier: KernelTier::Fast }).expect("backend");
        let want = format!("threads {}", MAX_THREADS_PER_CORE * cores);
        assert!(b.device().features.contains(&want), "{:?}", b.device().features);
        assert_eq!(b.pool.current_num_threads(), MAX_THREADS_PER_CORE * cores);
    }

    /// A graph with an output type the CPU plan cannot hold is refused by `supports` (which
    /// the engine asks before loading) and by `compile`, naming the op and the type.
    #[test]
    fn non_f32_outputs_are_refused() {
        use infr_core::{DType, GgmlType, GraphBuilder, Op, Shape, WeightData, WeightId, WeightInfo};
        let mut b = CpuBackend::new(CpuOptions { threads: 1, tier: KernelTier::Fast }).expect("backend");
        let table: Vec<u8> = (0..4 * 8).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let info = WeightInfo { ty: GgmlType::F32, dims: vec![8, 4] };
        let data = WeightData { name: "tok".into(), info, bytes: infr_gguf::TensorData::from_vec(table) };
        b.load_weight(WeightId(0), &data).expect("load");
        for (dtype, ok) in [(DType::F32, true), (DType::I32, false), (DType::F16, false)] {
            let shape = |_: WeightId| vec![8, 4];
            let mut g = GraphBuilder::new(2, 2, &shape);
            let x = g.embed(WeightId(0));
            let out = g.push_typed(Op::OutputRows { x }, Shape::matrix(2, 8), dtype);
            let node = g.node(out).clone();
            let graph = g.finish();
            assert_eq!(b.supports(&node).is_ok(), ok, "{dtype:?}");
            match b.compile(&graph) {
                Ok(_) => assert!(ok),
                Err(e) => {
                    assert!(!ok, "{e}");
                    assert!(e.to_string().contains(dtype.name()) && e.to_string().contains("output_rows"), "{e}");
                }
            }
        }
    }
}
