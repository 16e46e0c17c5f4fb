//! A compiled plan: one recorded command buffer per graph, replayed every step with new step
//! inputs (tokens, positions, page tables, output rows) written to a host-visible buffer.
//! One submit per step; only the output tensor is read back, or what a tail after the graph
//! keeps of it (top-k candidates, a diffusion canvas's draws).

use std::collections::HashMap;
use std::sync::Arc;

use ash::vk;
use infr_core::{Graph, Op, StepInputs, WeightId};

use crate::device::Context;
use crate::error::{CallExt, VkError, VkResult};
use crate::lower::{Dispatch, Lowered, Res, StepLayout};
use crate::memory::{compute_barrier, Buffer, MemKind};
use crate::pool::PoolNeeds;
use crate::profile::Profile;
use crate::weights::{GpuWeight, KvCache};

mod canvas;
mod order;
mod step;
mod topk;
#[cfg(test)]
pub(crate) use canvas::canvas_sample;

/// Where each node's output lives in the pool's activation buffer (byte offsets and sizes).
pub(crate) struct ActLayout {
    pub offsets: Vec<u64>,
    pub sizes: Vec<u64>,
}

/// What a plan binds besides its own buffers.
pub(crate) struct Resources<'a> {
    pub weights: &'a HashMap<WeightId, GpuWeight>,
    pub kv: Option<&'a KvCache>,
    pub tables: &'a Buffer,
    pub dummy: &'a Buffer,
    /// Activations, temporaries and scratch, shared by every plan.
    pub pool: &'a crate::pool::ActPool,
    /// Bumped whenever weights, the KV cache or the pool's buffers change (forces a re-record).
    pub generation: u64,
}

/// A graph recorded for replay.
pub(crate) struct Plan {
    ctx: Arc<Context>,
    n_tokens: usize,
    n_outputs: usize,
    out_cols: usize,
    /// Rows of the output node: `n_outputs`, or every token's for a pipeline stage that
    /// hands its activations on.
    out_rows: usize,
    dispatches: Vec<Dispatch>,
    /// Embedding tables read by the plan, with their row counts (token ids are checked).
    vocab: Vec<usize>,
    act_offsets: Vec<u64>,
    act_sizes: Vec<u64>,
    step: Buffer,
    step_words: Vec<u32>,
    /// The embedding mixture, for a graph with one.
    mix: Option<canvas::Mixture>,
    /// The device-side canvas sampler, built on first use (or by `prepare_canvas`).
    canvas: Option<canvas::CanvasTail>,
    layout: StepLayout,
    readback: Buffer,
    desc_pool: vk::DescriptorPool,
    cmd_pool: vk::CommandPool,
    /// The graph's dispatches.
    cmd: vk::CommandBuffer,
    /// Copies the whole output to `readback` (submitted after `cmd` by `execute`).
    tail_logits: vk::CommandBuffer,
    /// Select each output row's k best on the device (`execute_top_k`), one per k asked
    /// for (the scheduler's k changes with the requests in a step), built on first use.
    tops: Vec<topk::TopKTail>,
    fence: vk::Fence,
    /// Whether a submission launched on `fence` has not been waited for.
    in_flight: bool,
    queries: Option<vk::QueryPool>,
    recorded_generation: Option<u64>,
    /// Full barriers in the recorded command buffer (`order`).
    barriers: usize,
    /// The barriers it would hold without profiling (which puts one after every dispatch).
    unprofiled_barriers: usize,
}

impl Plan {
    /// What a plan of `graph` lowered to `lowered` needs from the backend's pool, and where
    /// each node's output lives in the activations.
    pub fn needs(ctx: &Context, graph: &Graph, lowered: &Lowered) -> VkResult<(PoolNeeds, ActLayout)> {
        let align = ctx.caps.storage_offset_alignment.max(16);
        let (act_offsets, act_bytes) = order::place_activations(graph, &lowered.dispatches, align);
        let act_sizes: Vec<u64> = graph.nodes.iter().map(|n| n.bytes().max(4)).collect();
        if let Some((i, &s)) = act_sizes.iter().enumerate().find(|(_, &s)| s > ctx.caps.max_storage_buffer_range) {
            return Err(VkError::Unsupported(format!(
                "node {i} output ({s} bytes) exceeds one storage binding ({})",
                ctx.caps.max_storage_buffer_range
            )));
        }
        let scratch = lowered.scratch_bytes;
        if scratch > ctx.caps.max_storage_buffer_range {
            return Err(VkError::Unsupported(format!(
                "attention scratch of {scratch} bytes exceeds a storage binding"
            )));
        }
        let needs = PoolNeeds { act: act_bytes, scratch, temps: lowered.temp_bytes.clone() };
        Ok((needs, ActLayout { offsets: act_offsets, sizes: act_sizes }))
    }

    /// Build a plan (its own buffers: step inputs, readback, mixture) and record it against
    /// `res`, whose pool already holds what [`Plan::needs`] said.
    pub fn new(
        ctx: &Arc<Context>,
        graph: &Graph,
        lowered: Lowered,
        ActLayout { offsets: act_offsets, sizes: act_sizes }: ActLayout,
        res: &Resources<'_>,
        profile: bool,
    ) -> VkResult<Self> {
        let Lowered { dispatches, mix_vocab, .. } = lowered;
        let mix = match mix_vocab {
            Some(v) => {
                let bytes = (1 + graph.n_tokens as u64 * v as u64) * 4;
                if bytes > ctx.caps.max_storage_buffer_range {
                    return Err(VkError::Unsupported(format!(
                        "an embedding mixture of {bytes} bytes exceeds one storage binding"
                    )));
                }
                Some(canvas::Mixture::new(ctx, bytes, v)?)
            }
            None => None,
        };
        let layout = StepLayout::new(graph.n_tokens, graph.n_outputs, graph.input_elements());
        // Room for every page list a step can carry: the sequences' lists hold distinct pages
        // of the cache (the window lists are as long), so at most all of them twice. Sized
        // once, so that serving does not grow it; without a cache, one page per token.
        let max_pages = res.kv.map_or(graph.n_tokens as u64 * 2, |kv| 2 * kv.spec.n_pages as u64);
        let step_cap = (layout.pages as u64 + max_pages + 64) * 4;
        if step_cap > ctx.caps.max_storage_buffer_range {
            return Err(VkError::Unsupported(format!(
                "step inputs of {step_cap} bytes (with {} handed-in activations) exceed one storage binding ({})",
                layout.hidden_len, ctx.caps.max_storage_buffer_range
            )));
        }
        let step = Buffer::new(ctx, step_cap, MemKind::Upload, "step inputs")?;
        let out = graph.node(graph.output());
        let readback = Buffer::new(ctx, out.bytes(), MemKind::Readback, "output readback")?;
        let vocab = graph
            .nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::Embed { table } => res.weights.get(table).map(|w| w.rows),
                _ => None,
            })
            .collect();
        let d = &ctx.device;
        // SAFETY: valid device and create infos; objects are owned by the plan.
        let (cmd_pool, cmds, fence, queries) = unsafe {
            let pinfo = vk::CommandPoolCreateInfo::default()
                .queue_family_index(ctx.queue_family)
                .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
            let cmd_pool = d.create_command_pool(&pinfo, None).vk("vkCreateCommandPool")?;
            let ainfo = vk::CommandBufferAllocateInfo::default()
                .command_pool(cmd_pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            let cmds = d.allocate_command_buffers(&ainfo.command_buffer_count(2)).vk("vkAllocateCommandBuffers")?;
            let fence = d.create_fence(&vk::FenceCreateInfo::default(), None).vk("vkCreateFence")?;
            let queries = if profile && ctx.caps.timestamp_period_ns > 0.0 {
                let qinfo = vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(dispatches.len() as u32 + 1);
                Some(d.create_query_pool(&qinfo, None).vk("vkCreateQueryPool")?)
            } else {
                None
            };
            (cmd_pool, cmds, fence, queries)
        };
        let n_sets = dispatches.len().max(1) as u32;
        let n_desc: u32 = dispatches.iter().map(|d| d.res.len() as u32).sum::<u32>().max(1);
        let sizes = [vk::DescriptorPoolSize::default().ty(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(n_desc)];
        let dpinfo = vk::DescriptorPoolCreateInfo::default().max_sets(n_sets).pool_sizes(&sizes);
        // SAFETY: valid create info.
        let desc_pool = unsafe { d.create_descriptor_pool(&dpinfo, None) }.vk("vkCreateDescriptorPool")?;
        let mut plan = Self {
            ctx: ctx.clone(),
            n_tokens: graph.n_tokens,
            n_outputs: graph.n_outputs,
            out_cols: out.cols(),
            out_rows: out.rows(),
            dispatches,
            vocab,
            act_offsets,
            act_sizes,
            step,
            step_words: Vec::new(),
            mix,
            canvas: None,
            layout,
            readback,
            desc_pool,
            cmd_pool,
            cmd: cmds[0],
            tail_logits: cmds[1],
            tops: Vec::new(),
            fence,
            in_flight: false,
            queries,
            recorded_generation: None,
            barriers: 0,
            unprofiled_barriers: 0,
        };
        plan.record(res)?;
        Ok(plan)
    }

    fn resolve(&self, r: Res, res: &Resources<'_>) -> VkResult<(vk::Buffer, u64, u64)> {
        let missing = |what: String| VkError::Unsupported(format!("plan refers to a missing {what}"));
        Ok(match r {
            Res::Act(i) => {
                let act = res.pool.act().ok_or_else(|| missing("activation buffer".into()))?;
                (act.raw, self.act_offsets[i as usize], self.act_sizes[i as usize])
            }
            Res::WeightChunk(id, c) => {
                let w = res
                    .weights
                    .get(&id)
                    .and_then(|w| w.chunks.get(c))
                    .ok_or_else(|| missing(format!("weight {}", id.0)))?;
                (w.buf.raw, 0, w.buf.size)
            }
            Res::ExpertSlots(id) | Res::ExpertTable(id) => {
                let p = res
                    .weights
                    .get(&id)
                    .and_then(|w| w.paged.as_ref())
                    .ok_or_else(|| missing(format!("expert slots of {}", id.0)))?;
                let b = if matches!(r, Res::ExpertSlots(_)) { &p.buf } else { &p.table };
                (b.raw, 0, b.size)
            }
            Res::WeightVec(id) => {
                let b = res
                    .weights
                    .get(&id)
                    .and_then(|w| w.vec.as_ref())
                    .ok_or_else(|| missing(format!("vector {}", id.0)))?;
                (b.raw, 0, b.size)
            }
            Res::KvK(l) | Res::KvV(l) => {
                let kv = res.kv.ok_or_else(|| missing("KV cache".into()))?;
                let bufs = if matches!(r, Res::KvK(_)) { &kv.k } else { &kv.v };
                let b = bufs.get(l as usize).ok_or_else(|| missing(format!("KV layer {l}")))?;
                (b.raw, 0, b.size)
            }
            Res::State(l) => {
                let kv = res.kv.ok_or_else(|| missing("KV cache".into()))?;
                let b = kv.state.get(l as usize).ok_or_else(|| missing(format!("state layer {l}")))?;
                (b.raw, 0, b.size)
            }
            Res::Step => (self.step.raw, 0, self.step.size),
            Res::Mix => match &self.mix {
                Some(m) => (m.buf.raw, 0, m.buf.size),
                None => return Err(missing("embedding mixture buffer".into())),
            },
            Res::Tables => (res.tables.raw, 0, res.tables.size),
            Res::Scratch => {
                let b = res.pool.scratch().ok_or_else(|| missing("scratch buffer".into()))?;
                (b.raw, 0, b.size)
            }
            Res::Temp(i) => {
                let b = res.pool.temp(i as usize).ok_or_else(|| missing(format!("temporary buffer {i}")))?;
                (b.raw, 0, b.size)
            }
            Res::Dummy => (res.dummy.raw, 0, res.dummy.size),
        })
    }

    /// (Re-)record the command buffer against the current resources.
    fn record(&mut self, res: &Resources<'_>) -> VkResult<()> {
        let d = &self.ctx.device;
        // SAFETY: the plan's command buffer is idle (every execute waits on its fence).
        unsafe {
            d.reset_descriptor_pool(self.desc_pool, vk::DescriptorPoolResetFlags::empty())
                .vk("vkResetDescriptorPool")?;
            let layouts: Vec<_> = self.dispatches.iter().map(|x| x.pipeline.set_layout).collect();
            let sets = if layouts.is_empty() {
                Vec::new()
            } else {
                let ainfo =
                    vk::DescriptorSetAllocateInfo::default().descriptor_pool(self.desc_pool).set_layouts(&layouts);
                d.allocate_descriptor_sets(&ainfo).vk("vkAllocateDescriptorSets")?
            };
            let mut accesses = Vec::with_capacity(self.dispatches.len());
            for (x, &set) in self.dispatches.iter().zip(&sets) {
                let bufs = x.res.iter().map(|&r| self.resolve(r, res)).collect::<VkResult<Vec<_>>>()?;
                write_storage_set(d, set, &bufs);
                accesses.push(binding_accesses(x, &bufs));
            }
            // Steps of few tokens, bound by latency, regroup independent dispatches into
            // levels; larger ones only drop the barriers between independent neighbours.
            // Profiles time every dispatch on its own: original order, a barrier after each.
            let levels = if self.n_tokens <= order::REGROUP_MAX_TOKENS {
                order::levels(&accesses)
            } else {
                order::in_order_levels(&accesses)
            };
            // One barrier between levels and one after the last.
            let count = |levels: &[u32]| levels.iter().max().map_or(0, |&l| l as usize + 1);
            self.unprofiled_barriers = count(&levels);
            let levels: Vec<u32> =
                if self.queries.is_some() { (0..self.dispatches.len() as u32).collect() } else { levels };
            self.barriers = count(&levels);
            tracing::debug!(dispatches = self.dispatches.len(), barriers = self.barriers, "plan recorded");
            if tracing::enabled!(tracing::Level::TRACE) {
                for ((x, l), a) in self.dispatches.iter().zip(&levels).zip(&accesses) {
                    let acc: Vec<_> = a
                        .iter()
                        .map(|a| format!("{}{:?}@{}..{}", if a.write { "w" } else { "r" }, a.buffer, a.start, a.end))
                        .collect();
                    tracing::trace!("level {l:4} {} {} {}", x.label.node, x.label.kernel, acc.join(" "));
                }
            }
            d.reset_command_buffer(self.cmd, vk::CommandBufferResetFlags::empty()).vk("vkResetCommandBuffer")?;
            d.begin_command_buffer(self.cmd, &vk::CommandBufferBeginInfo::default()).vk("vkBeginCommandBuffer")?;
            let cmd = self.cmd;
            if let Some(q) = self.queries {
                d.cmd_reset_query_pool(cmd, q, 0, self.dispatches.len() as u32 + 1);
                d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, q, 0);
            }
            let max_x = self.ctx.caps.max_workgroup_count[0].min(65535);
            let mut level = None;
            for (slot, i) in order::order(&levels).into_iter().enumerate() {
                let (x, set) = (&self.dispatches[i], sets[i]);
                if level.is_some_and(|l| l != levels[i]) {
                    compute_barrier(d, cmd);
                }
                level = Some(levels[i]);
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, x.pipeline.raw);
                d.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, x.pipeline.layout, 0, &[set], &[]);
                if !x.push.is_empty() {
                    d.cmd_push_constants(cmd, x.pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, &x.push);
                }
                let gx = x.groups.clamp(1, max_x);
                let gy = x.groups.div_ceil(gx).max(1);
                if gy > self.ctx.caps.max_workgroup_count[1] {
                    return Err(VkError::Unsupported(format!("{}: {} workgroups", x.label.kernel, x.groups)));
                }
                if x.groups > 0 {
                    d.cmd_dispatch(cmd, gx, gy, 1);
                }
                if let Some(q) = self.queries {
                    compute_barrier(d, cmd);
                    d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::COMPUTE_SHADER, q, slot as u32 + 1);
                }
            }
            // The tails, and the next step, read what the last level wrote.
            if self.queries.is_none() && level.is_some() {
                compute_barrier(d, cmd);
            }
            d.end_command_buffer(cmd).vk("vkEndCommandBuffer")?;
            let tail = self.tail_logits;
            d.reset_command_buffer(tail, vk::CommandBufferResetFlags::empty()).vk("vkResetCommandBuffer")?;
            d.begin_command_buffer(tail, &vk::CommandBufferBeginInfo::default()).vk("vkBeginCommandBuffer")?;
            let last = self.act_offsets.len() - 1;
            let region =
                [vk::BufferCopy::default().src_offset(self.act_offsets[last]).dst_offset(0).size(self.readback.size)];
            let act = res.pool.act().ok_or_else(|| VkError::Unsupported("no activation buffer".into()))?;
            d.cmd_copy_buffer(tail, act.raw, self.readback.raw, &region);
            host_read_barrier(d, tail);
            d.end_command_buffer(tail).vk("vkEndCommandBuffer")?;
        }
        self.recorded_generation = Some(res.generation);
        Ok(())
    }

    /// Run the plan once and read back the output.
    pub fn execute(
        &mut self,
        inp: &StepInputs<'_>,
        res: &Resources<'_>,
        prof: Option<&mut Profile>,
    ) -> Result<Vec<f32>, infr_core::BackendError> {
        self.launch_rows(inp, res)?;
        self.complete(prof)?;
        Ok(self.read_rows())
    }

    /// Start the plan with the whole output rows as its readback; [`Plan::complete`] waits.
    pub fn launch_rows(&mut self, inp: &StepInputs<'_>, res: &Resources<'_>) -> Result<(), infr_core::BackendError> {
        self.refresh(res)?;
        self.launch(inp, res, self.tail_logits, false)
    }

    /// The output rows of the last finished run (`n_outputs × cols`).
    pub fn read_rows(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.out_rows * self.out_cols];
        self.readback.read(0, bytemuck::cast_slice_mut(&mut out));
        out
    }

    /// Record again against `res` if weights, the KV cache or the pool's buffers changed since
    /// the last recording; the tails bound the old buffers and are built again on next use.
    pub fn refresh(&mut self, res: &Resources<'_>) -> Result<(), infr_core::BackendError> {
        if self.recorded_generation == Some(res.generation) {
            return Ok(());
        }
        if self.in_flight {
            return Err(infr_core::BackendError::InvalidInput("re-recording a plan whose run is in flight".into()));
        }
        while !self.tops.is_empty() {
            self.drop_top(0);
        }
        self.drop_canvas_tail();
        let dev = self.ctx.caps.id.clone();
        self.record(res).map_err(|e| e.into_backend(&dev))
    }

    /// [`Plan::launch`], then [`Plan::complete`].
    fn submit(
        &mut self,
        inp: &StepInputs<'_>,
        res: &Resources<'_>,
        prof: Option<&mut Profile>,
        tail: vk::CommandBuffer,
        reuse_mix: bool,
    ) -> Result<(), infr_core::BackendError> {
        self.launch(inp, res, tail, reuse_mix)?;
        self.complete(prof)
    }

    /// Write the step inputs, (re-)record if needed, submit the mixture's prologue (unless the
    /// step reuses the device mixture), the dispatches and `tail`; [`Plan::complete`] waits.
    fn launch(
        &mut self,
        inp: &StepInputs<'_>,
        res: &Resources<'_>,
        tail: vk::CommandBuffer,
        reuse_mix: bool,
    ) -> Result<(), infr_core::BackendError> {
        if self.in_flight {
            return Err(infr_core::BackendError::InvalidInput("the plan's previous run is still in flight".into()));
        }
        let dev = self.ctx.caps.id.clone();
        let e = |err: VkError| err.into_backend(&dev);
        match res.kv {
            Some(kv) => inp.validate(self.n_tokens, self.n_outputs, &kv.spec)?,
            None => {
                let n = self.n_tokens;
                if inp.tokens.len() != n || inp.positions.len() != n || inp.token_seq.len() != n {
                    return Err(infr_core::BackendError::InvalidInput(format!(
                        "expected {n} tokens/positions/seq ids"
                    )));
                }
                if inp.output_rows.len() != self.n_outputs || inp.output_rows.iter().any(|&r| r as usize >= n) {
                    return Err(infr_core::BackendError::InvalidInput(format!(
                        "expected {} output rows below {n}",
                        self.n_outputs
                    )));
                }
                if inp.token_seq.iter().any(|&s| s as usize >= inp.seqs.len()) {
                    return Err(infr_core::BackendError::InvalidInput("token refers to a missing sequence".into()));
                }
            }
        }
        if inp.hidden.len() != self.layout.hidden_len as usize {
            return Err(infr_core::BackendError::InvalidInput(format!(
                "the step hands in {} activations, the plan's input takes {}",
                inp.hidden.len(),
                self.layout.hidden_len
            )));
        }
        for &v in &self.vocab {
            if let Some(&t) = inp.tokens.iter().find(|&&t| t as usize >= v) {
                return Err(infr_core::BackendError::InvalidInput(format!("token id {t} >= vocabulary size {v}")));
            }
        }
        self.step_data(inp);
        let need = (self.step_words.len() * 4) as u64;
        let mut rerecord = self.recorded_generation != Some(res.generation);
        if need > self.step.size {
            self.step = Buffer::new(&self.ctx, need.next_power_of_two(), MemKind::Upload, "step inputs").map_err(e)?;
            rerecord = true;
        }
        if rerecord {
            self.record(res).map_err(e)?;
        }
        let words = std::mem::take(&mut self.step_words);
        self.step.write(0, bytemuck::cast_slice(&words));
        self.step_words = words;
        let prologue = self.mix_prologue(inp, reuse_mix)?;
        let d = &self.ctx.device;
        let cmds: Vec<_> = prologue.into_iter().chain([self.cmd, tail]).collect();
        let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
        // SAFETY: the command buffer is fully recorded and idle; the fence is unsignalled.
        unsafe {
            d.queue_submit(self.ctx.queue, &submit, self.fence).vk("vkQueueSubmit").map_err(e)?;
        }
        self.in_flight = true;
        Ok(())
    }

    /// Dispatches of the plan.
    pub fn dispatch_count(&self) -> usize {
        self.dispatches.len()
    }

    /// Full barriers in the recorded command buffer.
    pub fn barrier_count(&self) -> usize {
        self.barriers
    }

    /// Wait for the run [`Plan::launch`] started (nothing to do if none is in flight) and add
    /// its timings to `prof`.
    pub fn complete(&mut self, prof: Option<&mut Profile>) -> Result<(), infr_core::BackendError> {
        if !self.in_flight {
            return Ok(());
        }
        let dev = self.ctx.caps.id.clone();
        let e = |err: VkError| err.into_backend(&dev);
        let d = &self.ctx.device;
        // SAFETY: the fence belongs to the submission in flight.
        unsafe {
            d.wait_for_fences(&[self.fence], true, u64::MAX).vk("vkWaitForFences").map_err(e)?;
            d.reset_fences(&[self.fence]).vk("vkResetFences").map_err(e)?;
        }
        self.in_flight = false;
        if let (Some(q), Some(p)) = (self.queries, prof) {
            let n = self.dispatches.len() + 1;
            let mut ts = vec![0u64; n];
            // SAFETY: all queries were written by the finished submission.
            let ok = unsafe {
                d.get_query_pool_results(q, 0, &mut ts, vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT)
            };
            if ok.is_ok() {
                let period = self.ctx.caps.timestamp_period_ns as f64;
                let ns: Vec<f64> = ts.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64 * period).collect();
                let labels: Vec<_> = self.dispatches.iter().map(|x| x.label.clone()).collect();
                let print = infr_core::prof_enabled();
                p.add_submit(&labels, &ns, print);
                if print {
                    eprintln!(
                        "[infr-vulkan prof] (timed one by one; unprofiled, these {} dispatches run in {} levels)",
                        self.dispatches.len(),
                        self.unprofiled_barriers
                    );
                }
            }
        }
        Ok(())
    }
}

/// Point storage bindings 0.. of `set` at `bufs` (buffer, offset, range).
fn write_storage_set(d: &ash::Device, set: vk::DescriptorSet, bufs: &[(vk::Buffer, u64, u64)]) {
    let infos: Vec<_> =
        bufs.iter().map(|&(b, o, r)| [vk::DescriptorBufferInfo::default().buffer(b).offset(o).range(r)]).collect();
    let writes: Vec<_> = infos
        .iter()
        .enumerate()
        .map(|(i, info)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(i as u32)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info)
        })
        .collect();
    // SAFETY: the set is not in use by any pending command buffer (plans re-record only when
    // idle; top-k tails write their fresh sets once).
    unsafe { d.update_descriptor_sets(&writes, &[]) };
}

/// What dispatch `x` may read and write through its bindings `bufs` (buffer, offset, range).
fn binding_accesses(x: &Dispatch, bufs: &[(vk::Buffer, u64, u64)]) -> Vec<order::Access> {
    x.accessed()
        .map(|(b, _, write)| {
            let (buf, off, range) = bufs[b];
            order::Access::new(buf, off, range, write)
        })
        .collect()
}

/// Make transfer writes visible to the host.
fn host_read_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let host = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ)];
    // SAFETY: recording into a command buffer in the recording state.
    unsafe {
        d.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &host,
            &[],
            &[],
        )
    };
}

impl Drop for Plan {
    fn drop(&mut self) {
        if self.complete(None).is_err() {
            tracing::warn!("a plan dropped while its run failed to finish");
        }
        while !self.tops.is_empty() {
            self.drop_top(0);
        }
        self.drop_canvas_tail();
        self.drop_mixture_cmds();
        let d = &self.ctx.device;
        // SAFETY: every submission waited on the fence, so nothing of the plan is in flight.
        unsafe {
            if let Some(q) = self.queries {
                d.destroy_query_pool(q, None);
            }
            d.destroy_descriptor_pool(self.desc_pool, None);
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.cmd_pool, None);
        }
    }
}
