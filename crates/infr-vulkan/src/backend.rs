//! `VulkanBackend`: the [`Backend`] trait on one Vulkan device.

use std::collections::HashMap;
use std::sync::Arc;

use infr_core::{
    Backend, BackendError, DeviceInfo, Graph, KvSpec, PlanId, Readback, StepInputs, StepOutput, Submitted, WeightData,
    WeightId,
};

use crate::device::{validation_requested, Context, DeviceCaps};
use crate::error::{VkError, VkResult};
use crate::memory::{Buffer, MemKind, OneShot};
use crate::pipeline::Pipelines;
use crate::plan::{Plan, Resources};
use crate::profile::Profile;
use crate::weights::{upload_weight, GpuWeight, KvCache};

/// Options for opening a Vulkan backend.
#[derive(Debug, Clone, Default)]
pub struct VulkanOptions {
    /// Device index (`Vulkan<N>`).
    pub device: usize,
    /// Enable the Khronos validation layer (also on with `INFR_VK_VALIDATION=1`).
    pub validation: bool,
    /// Use only the portable kernels (no subgroup operations): for tests and diagnosis.
    pub portable_kernels: bool,
    /// Collect per-dispatch timings (also on with `INFR_PROF_OPS=1`).
    pub profile: bool,
    /// Do not use cooperative-matrix kernels even where the device has them.
    pub disable_coopmat: bool,
    /// Do not use the int8 (packed dot) matrix-vector kernels even where the device has them.
    pub disable_int8: bool,
    /// Run every graph node as its own dispatch (no fused kernels; `INFR_VK_FUSION=0` through
    /// the config): for tests and diagnosis.
    pub disable_fusion: bool,
    /// Key splits per (token, head) of decode attention; 0 picks them from the shape
    /// (`kernels.vulkan.flash_splits`).
    pub attention_splits: u32,
    /// Most bytes of one weight slice the f16 prefill matmuls dequantize at once (0: 256
    /// MiB, which holds a whole matrix of the common models): for tests of the multi-slice
    /// path that larger models and devices with small buffers take.
    pub f16_slice_bytes: u64,
    /// Most bytes of device memory the backend's buffers may hold (0: as much as the device
    /// gives): leaves room for other programs on a shared GPU; an allocation past it is an
    /// out-of-memory error like the device's own.
    pub memory_limit: u64,
    /// Place KV cache layers that find no room in device memory in host memory the kernels
    /// read across the bus (slower), instead of failing (`kv.spill_to_host`).
    pub kv_spill_to_host: bool,
    /// Steps of at least this many tokens run the delta rule in its chunked form (0: the
    /// default, never, or `INFR_VK_DELTA_CHUNK_MIN`): for tests of that path on short steps.
    pub delta_chunk_min: u32,
    /// Decode attention by lane groups (`attention_decode`; `Some(true)`; `None`: the
    /// default, the per-head kernel, or `INFR_VK_ATTN_LANES`): for tests of either kernel.
    pub lane_attention: Option<bool>,
    /// Prefill's Q4_K / Q6_K dequantization to f16 stores in stripes (`Some(false)`: a
    /// thread's 32 elements together; `None`: the default, striped, or
    /// `INFR_VK_DEQ16_STRIPED`): for tests of either form.
    pub striped_dequant: Option<bool>,
    /// The cooperative matmul dequantizes Q4_K and Q6_K weight units as it reads them (also
    /// with `INFR_VK_COOP_RAW=0`) instead of reading raw words and dequantizing when staging,
    /// which keeps the next k-steps' loads in flight (16-row decode 1.68x faster, c40): for
    /// tests and measurements of the older loader.
    pub coop_dequant_on_read: bool,
}

/// The Vulkan backend.
pub struct VulkanBackend {
    // Field order matters for drop: plans and buffers go before the pipelines and the context.
    plans: Vec<Plan>,
    /// Activations, temporaries and scratch of every plan.
    pool: crate::pool::ActPool,
    weights: HashMap<WeightId, GpuWeight>,
    kv: Option<KvCache>,
    tables: Buffer,
    dummy: Buffer,
    one: OneShot,
    pipelines: Pipelines,
    profile: Option<Profile>,
    generation: u64,
    features: crate::lower::Features,
    kv_spill: bool,
    /// The step [`Backend::submit`] started and nothing has waited for yet.
    in_flight: Option<InFlight>,
    /// Results of a step finished early (another call needed the device), for its `wait`.
    finished: Option<(PlanId, StepOutput)>,
    info: DeviceInfo,
    ctx: Arc<Context>,
}

/// A submitted step: its plan and what it reads back.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    plan: PlanId,
    /// `k` of a device top-k readback; `None` for whole rows.
    top_k: Option<usize>,
}

impl VulkanBackend {
    /// Open a device.
    pub fn new(opts: &VulkanOptions) -> Result<Self, BackendError> {
        let id = format!("Vulkan{}", opts.device);
        let e = |err: VkError| err.into_backend(&id);
        let ctx = Arc::new(Context::new(opts.device, opts.validation || validation_requested()).map_err(e)?);
        ctx.device_limit.store(opts.memory_limit, std::sync::atomic::Ordering::Relaxed);
        let mut one = OneShot::new(&ctx).map_err(e)?;
        let words = crate::tables::words();
        let mut tables =
            Buffer::new(&ctx, (words.len() * 4) as u64, MemKind::DeviceLocal, "i-quant tables").map_err(e)?;
        one.upload(&mut tables, 0, bytemuck::cast_slice(&words)).map_err(e)?;
        let mut dummy = Buffer::new(&ctx, 256, MemKind::DeviceLocal, "placeholder").map_err(e)?;
        one.upload(&mut dummy, 0, &[0u8; 256]).map_err(e)?;
        let pipelines = Pipelines::new(&ctx).map_err(e)?;
        let info = ctx.caps.device_info();
        Ok(Self {
            plans: Vec::new(),
            pool: Default::default(),
            weights: HashMap::new(),
            kv: None,
            tables,
            dummy,
            one,
            pipelines,
            profile: (opts.profile || infr_core::prof_enabled()).then(Profile::default),
            generation: 0,
            features: crate::lower::Features::of(
                &ctx.caps,
                opts.portable_kernels,
                opts.disable_coopmat,
                opts.disable_int8,
                opts.disable_fusion,
            )
            .with_attention_splits(opts.attention_splits)
            .with_f16_slice_bytes(opts.f16_slice_bytes)
            .with_delta_chunk_min(opts.delta_chunk_min)
            .with_lane_attention(opts.lane_attention)
            .with_striped_dequant(opts.striped_dequant)
            .with_coop_raw_units(
                !(opts.coop_dequant_on_read || std::env::var("INFR_VK_COOP_RAW").is_ok_and(|v| v.trim() == "0")),
            ),
            kv_spill: opts.kv_spill_to_host,
            in_flight: None,
            finished: None,
            info,
            ctx,
        })
    }

    /// Lower `graph` with `features` and allocate its plan.
    fn plan(&mut self, graph: &Graph, features: crate::lower::Features) -> VkResult<Plan> {
        let kv = self.kv.as_ref().map(|k| &k.spec);
        let lowered = crate::lower::lower(graph, &self.weights, kv, &mut self.pipelines, features)?;
        let (needs, acts) = Plan::needs(&self.ctx, graph, &lowered)?;
        // Plans recorded against buffers the pool replaces record again before they run.
        let reserved = self.pool.reserve(&self.ctx, &needs);
        if self.pool.take_changed() {
            self.generation += 1;
        }
        reserved?;
        Plan::new(&self.ctx, graph, lowered, acts, &self.resources(), self.profile.is_some())
    }

    /// Whether a top-`k` selection runs on the device (topk.wgsl keeps one winner per subgroup
    /// in 64 slots: subgroups of 4 lanes or more).
    fn device_top_k(&self, k: usize) -> bool {
        k > 0
            && k <= crate::fused_kernels::MAX_DEVICE_TOP_K
            && self.features.subgroups
            && self.ctx.caps.subgroup_size >= 4
    }

    /// Bytes of the KV cache in host memory because the device had no room for them.
    pub fn kv_host_bytes(&self) -> u64 {
        self.kv.as_ref().map_or(0, |k| k.host_bytes)
    }

    /// Device-local bytes the backend's buffers hold now (weights, KV cache, plans).
    pub fn device_bytes(&self) -> u64 {
        self.ctx.device_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Capabilities of the device.
    pub fn caps(&self) -> &DeviceCaps {
        &self.ctx.caps
    }

    /// Whether prefill matmuls use cooperative matrices on this device.
    pub fn uses_coopmat(&self) -> bool {
        self.features.coopmat.is_some()
    }

    /// The fewest activation rows (a step's tokens) whose quantized matmuls run over f16
    /// operands (cooperative matrices) instead of int8 activations: their rounding differs
    /// from llama.cpp's CPU by ~3e-4 relative per product. `None` without cooperative matrices.
    pub fn f16_min_rows(&self) -> Option<usize> {
        crate::skinny_matmul::f16_min_rows(self.features)
    }

    /// Whether kernels may use subgroup arithmetic (the fused row kernels need it).
    pub fn has_subgroups(&self) -> bool {
        self.features.subgroups
    }

    /// Whether decode matmuls of Q8_0/Q4_K/Q6_K use int8 activations and packed dot products.
    pub fn uses_int8(&self) -> bool {
        self.features.int8
    }

    /// Whether decode attention over an f16 cache runs by lane groups (`attention_decode`).
    pub fn uses_lane_attention(&self) -> bool {
        self.features.lane_attention && self.features.min_subgroup >= 4
    }

    /// Whether the validation layer is active.
    pub fn validation_enabled(&self) -> bool {
        self.ctx.instance.validation
    }

    /// Validation-layer warnings and errors reported since the last call (by any backend of
    /// this process: they share one instance).
    pub fn take_validation_messages(&self) -> Vec<String> {
        self.ctx.take_messages()
    }

    /// Dispatches and full barriers in plan `id`'s recorded commands: independent dispatches
    /// share a level with no barrier between them, except under profiling (one barrier after
    /// each dispatch, so each is timed alone). `None` for an unknown plan.
    pub fn plan_barriers(&self, id: PlanId) -> Option<(usize, usize)> {
        self.plans.get(id.0 as usize).map(|p| (p.dispatch_count(), p.barrier_count()))
    }

    /// The per-op profile collected so far (`INFR_PROF_OPS=1`).
    pub fn profile(&self) -> Option<&Profile> {
        self.profile.as_ref()
    }

    /// What plans bind besides their own buffers.
    fn resources(&self) -> Resources<'_> {
        Resources {
            weights: &self.weights,
            kv: self.kv.as_ref(),
            tables: &self.tables,
            dummy: &self.dummy,
            pool: &self.pool,
            generation: self.generation,
        }
    }

    /// Plan `id` with the resources it binds, the profile and the pipelines (disjoint
    /// borrows of the backend, for running it).
    fn plan_parts(
        &mut self,
        id: PlanId,
    ) -> Result<(&mut Plan, Resources<'_>, Option<&mut Profile>, &mut Pipelines), BackendError> {
        self.settle()?;
        let plan =
            self.plans.get_mut(id.0 as usize).ok_or_else(|| BackendError::InvalidInput("unknown plan".into()))?;
        let res = Resources {
            weights: &self.weights,
            kv: self.kv.as_ref(),
            tables: &self.tables,
            dummy: &self.dummy,
            pool: &self.pool,
            generation: self.generation,
        };
        Ok((plan, res, self.profile.as_mut(), &mut self.pipelines))
    }

    /// Finish the step in flight, if any, keeping its results for its `wait`: whatever runs
    /// next may reuse the activation pool or the plan's buffers.
    fn settle(&mut self) -> Result<(), BackendError> {
        if let Some(f) = self.in_flight.take() {
            let out = self.complete(f)?;
            if self.finished.replace((f.plan, out)).is_some() {
                tracing::warn!("{}: a submitted step was never waited for; its results are dropped", self.info.id);
            }
        }
        Ok(())
    }

    /// Wait for `f`'s step and read its results.
    fn complete(&mut self, f: InFlight) -> Result<StepOutput, BackendError> {
        let plan =
            self.plans.get_mut(f.plan.0 as usize).ok_or_else(|| BackendError::InvalidInput("unknown plan".into()))?;
        plan.complete(self.profile.as_mut())?;
        Ok(match f.top_k {
            Some(k) => StepOutput::TopK(plan.read_top_k(k)),
            None => StepOutput::Rows(plan.read_rows()),
        })
    }

    fn err(&self, e: VkError) -> BackendError {
        e.into_backend(&self.info.id)
    }
}

impl Backend for VulkanBackend {
    fn device(&self) -> &DeviceInfo {
        &self.info
    }

    fn memory_available(&self) -> Option<u64> {
        let limit = self.ctx.device_limit.load(std::sync::atomic::Ordering::Relaxed);
        let total = if limit > 0 { limit.min(self.info.memory_bytes) } else { self.info.memory_bytes };
        Some(total.saturating_sub(self.device_bytes()))
    }

    fn weight_host_available(&self) -> Option<u64> {
        infr_core::host_meminfo_bytes("MemAvailable")
    }

    fn max_output_bytes(&self) -> Option<u64> {
        Some(self.features.max_binding_bytes)
    }

    fn kv_spill_available(&self) -> Option<u64> {
        self.kv_spill.then(|| infr_core::host_meminfo_bytes("MemAvailable")).flatten()
    }

    fn supports(&self, node: &infr_core::Node) -> Result<(), String> {
        crate::lower::supports(node)
    }

    fn load_weight(&mut self, id: WeightId, weight: &WeightData) -> Result<(), BackendError> {
        self.load_weight_placed(id, weight, infr_core::WeightPlace::Device)
    }

    fn load_weight_placed(
        &mut self,
        id: WeightId,
        weight: &WeightData,
        place: infr_core::WeightPlace,
    ) -> Result<(), BackendError> {
        self.settle()?;
        // Replacing a weight frees buffers that recorded plans may bind: wait, then re-record lazily.
        if self.weights.contains_key(&id) {
            self.ctx.wait_idle();
        }
        let kind = match place {
            infr_core::WeightPlace::Device => MemKind::DeviceLocal,
            infr_core::WeightPlace::Host | infr_core::WeightPlace::Paged { .. } => MemKind::HostSpill,
        };
        let mut w = upload_weight(&self.ctx, &mut self.one, weight, kind).map_err(|e| self.err(e))?;
        if let infr_core::WeightPlace::Paged { experts, slots } = place {
            w.paged =
                crate::expert_cache::PagedExperts::new(&self.ctx, &mut self.one, &w, experts, slots, &weight.name)
                    .map_err(|e| self.err(e))?;
        }
        self.weights.insert(id, w);
        self.generation += 1;
        Ok(())
    }

    fn expert_cache_stats(&mut self) -> Result<Option<(u64, u64)>, BackendError> {
        self.settle()?;
        let mut total: Option<(u64, u64)> = None;
        for w in self.weights.values() {
            let Some(pe) = &w.paged else { continue };
            let mut head = [0u8; 12];
            self.one.download(&pe.table, 0, &mut head).map_err(|e| e.into_backend(&self.info.id))?;
            let word = |i: usize| u32::from_le_bytes(head[4 * i..4 * i + 4].try_into().expect("4 bytes")) as u64;
            let t = total.get_or_insert((0, 0));
            t.0 += word(1);
            t.1 += word(2);
        }
        Ok(total)
    }

    fn init_kv(&mut self, spec: &KvSpec) -> Result<(), BackendError> {
        self.settle()?;
        self.ctx.wait_idle();
        self.kv = None;
        let kv = KvCache::new(&self.ctx, &mut self.one, spec, self.kv_spill).map_err(|e| self.err(e))?;
        if kv.host_bytes > 0 {
            let total: u64 = kv.k.iter().chain(&kv.v).map(|b| b.size).sum();
            tracing::warn!(
                "{}: {} of the KV cache's {} MiB are in host memory (the device's budget is spent): \
                 attention over those layers reads across the bus; a smaller context, --kv-type q8_0 \
                 or fewer parallel sequences keep it on the device",
                self.info.id,
                kv.host_bytes >> 20,
                total >> 20
            );
        }
        self.kv = Some(kv);
        self.generation += 1;
        Ok(())
    }

    fn compile(&mut self, graph: &Graph) -> Result<PlanId, BackendError> {
        self.settle()?;
        let id = self.info.id.clone();
        let plan = match self.plan(graph, self.features) {
            // The f16 prefill path's buffers (dequantized weights, f16 activations) are
            // extra memory: a plan that does not fit with them may fit without.
            Err(VkError::OutOfMemory { what, bytes }) if self.features.f16_prefill => {
                tracing::warn!(
                    "{}: out of memory planning with f16 prefill matmuls ({what}, {bytes} bytes); \
                     planning with the kernels that dequantize tiles on the fly",
                    self.info.id
                );
                self.plan(graph, self.features.without_f16_prefill())
            }
            r => r,
        }
        .map_err(|err| err.into_backend(&id))?;
        self.pipelines.save();
        self.plans.push(plan);
        Ok(PlanId(self.plans.len() as u32 - 1))
    }

    fn execute(&mut self, plan: PlanId, inputs: &StepInputs<'_>) -> Result<Vec<f32>, BackendError> {
        let (p, res, prof, _) = self.plan_parts(plan)?;
        p.execute(inputs, &res, prof)
    }

    fn execute_top_k(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
        k: usize,
        adjust: &[Vec<infr_core::LogitAdjust>],
    ) -> Result<Vec<Vec<(u32, f32)>>, BackendError> {
        if !self.device_top_k(k) {
            let out = self.execute(plan, inputs)?;
            return Ok(infr_core::top_k_rows_adjusted(out, inputs.output_rows.len(), k, adjust));
        }
        let (p, res, prof, pipes) = self.plan_parts(plan)?;
        p.execute_top_k(inputs, &res, prof, k, adjust, pipes)
    }

    fn submit(&mut self, plan: PlanId, inputs: &StepInputs<'_>, read: Readback<'_>) -> Result<Submitted, BackendError> {
        let (top_k, host_top_k) = match read {
            Readback::TopK { k, .. } if self.device_top_k(k) => (Some(k), None),
            // A selection the device cannot make: whole rows back, selected at `wait`.
            Readback::TopK { k, adjust } => (None, Some((k, adjust.to_vec()))),
            Readback::Rows => (None, None),
        };
        let (p, res, _, pipes) = self.plan_parts(plan)?;
        match (read, top_k) {
            (Readback::TopK { adjust, .. }, Some(k)) => p.launch_top_k(inputs, &res, k, adjust, pipes)?,
            _ => p.launch_rows(inputs, &res)?,
        }
        self.in_flight = Some(InFlight { plan, top_k });
        Ok(Submitted { plan, done: None, host_top_k, rows: inputs.output_rows.len() })
    }

    fn wait(&mut self, step: Submitted) -> Result<StepOutput, BackendError> {
        if let Some(done) = step.done {
            return Ok(done);
        }
        let out = match self.in_flight {
            Some(f) if f.plan == step.plan => {
                self.in_flight = None;
                self.complete(f)?
            }
            _ => match self.finished.take() {
                Some((plan, out)) if plan == step.plan => out,
                other => {
                    self.finished = other;
                    return Err(BackendError::InvalidInput("waiting for a step that is not in flight".into()));
                }
            },
        };
        Ok(match (out, step.host_top_k) {
            (StepOutput::Rows(rows), Some((k, adjust))) => {
                StepOutput::TopK(infr_core::top_k_rows_adjusted(rows, step.rows, k, &adjust))
            }
            (out, _) => out,
        })
    }

    fn prepare_top_k(&mut self, plan: PlanId, k: usize) -> Result<(), BackendError> {
        if self.device_top_k(k) {
            let (p, res, _, pipes) = self.plan_parts(plan)?;
            p.top_tail(k, &res, pipes)?;
        }
        Ok(())
    }

    fn canvas_sampler(&self) -> bool {
        true
    }

    fn execute_canvas_sample(
        &mut self,
        plan: PlanId,
        inputs: &StepInputs<'_>,
        sample: &infr_core::CanvasSampleInputs<'_>,
    ) -> Result<Vec<infr_core::CanvasDraw>, BackendError> {
        let (p, res, prof, pipes) = self.plan_parts(plan)?;
        p.execute_canvas_sample(inputs, &res, prof, sample, pipes)
    }

    fn prepare_canvas_sample(&mut self, plan: PlanId) -> Result<(), BackendError> {
        let (p, res, _, pipes) = self.plan_parts(plan)?;
        p.prepare_canvas(&res, pipes)
    }

    fn copy_kv_pages(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        let kv = self.kv.as_ref().ok_or_else(|| BackendError::InvalidInput("KV cache not initialised".into()))?;
        if let Some(&(s, d)) = pairs.iter().find(|&&(s, d)| s >= kv.spec.n_pages || d >= kv.spec.n_pages) {
            return Err(BackendError::InvalidInput(format!("page copy {s} -> {d} out of range")));
        }
        kv.copy_pages(&mut self.one, pairs).map_err(|e| e.into_backend(&self.info.id))
    }

    fn copy_state(&mut self, pairs: &[(u32, u32)]) -> Result<(), BackendError> {
        let kv = self.kv.as_ref().ok_or_else(|| BackendError::InvalidInput("KV cache not initialised".into()))?;
        let n = kv.spec.n_state_slots;
        if let Some(&(s, d)) = pairs.iter().find(|&&(s, d)| s >= n || d >= n) {
            return Err(BackendError::InvalidInput(format!("state copy {s} -> {d} out of range")));
        }
        kv.copy_state(&mut self.one, pairs).map_err(|e| e.into_backend(&self.info.id))
    }
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        self.ctx.wait_idle();
        if let Some(p) = &self.profile {
            if p.submits > 0 {
                for line in p.report() {
                    eprintln!("{line}");
                }
            }
        }
    }
}
