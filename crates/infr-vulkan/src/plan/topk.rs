//! The device top-k after a plan: the samplers' adjustments (`logit_adjust.wgsl`), two passes
//! of `topk.wgsl` over the output rows, then a copy of the winners to a small readback buffer,
//! recorded once per k as a tail command buffer submitted after the plan's.

use ash::vk;
use infr_core::{LogitAdjust, StepInputs, MAX_LOGIT_ADJUST};

use super::{host_read_barrier, write_storage_set, Plan, Resources};
use crate::error::{CallExt, VkError, VkResult};
use crate::memory::{compute_barrier, Buffer, MemKind};
use crate::pipeline::Pipelines;
use crate::profile::Profile;

/// The device top-k after a plan: the samplers' adjustments (`logit_adjust.wgsl`), two passes
/// of `topk.wgsl` over the output rows, then a copy of the winners to a small readback buffer.
pub(super) struct TopKTail {
    k: usize,
    cmd: vk::CommandBuffer,
    desc_pool: vk::DescriptorPool,
    /// Each row's adjustment count, then [`MAX_LOGIT_ADJUST`] entries per row (written before
    /// each submission).
    adjust: Buffer,
    /// Pass-1 winners (k per chunk of each row) and final winners (k per row).
    _chunk_best: Buffer,
    _row_best: Buffer,
    readback: Buffer,
}

/// Top-k tails a plan keeps (one per k).
const MAX_TOP_TAILS: usize = 4;

/// 16-byte words of per-row adjustment counts at the start of a tail's adjustment buffer.
fn adjust_head_words(rows: usize) -> usize {
    rows.div_ceil(4)
}

/// One top-k pass: pipeline, (buffer, offset, range) of its three bindings, push constants,
/// workgroups.
type TopKPass<'a> = (&'a crate::pipeline::Pipeline, [(vk::Buffer, u64, u64); 3], crate::fused_kernels::TopKParams, u32);

impl Plan {
    /// Run the plan once and read back each output row's `k` best (see `TopKTail`).
    pub fn execute_top_k(
        &mut self,
        inp: &StepInputs<'_>,
        res: &Resources<'_>,
        prof: Option<&mut Profile>,
        k: usize,
        adjust: &[Vec<LogitAdjust>],
        pipes: &mut Pipelines,
    ) -> Result<Vec<Vec<(u32, f32)>>, infr_core::BackendError> {
        self.launch_top_k(inp, res, k, adjust, pipes)?;
        self.complete(prof)?;
        Ok(self.read_top_k(k))
    }

    /// Start the plan with each output row's `k` best after `adjust` as its readback;
    /// [`Plan::complete`] waits.
    pub fn launch_top_k(
        &mut self,
        inp: &StepInputs<'_>,
        res: &Resources<'_>,
        k: usize,
        adjust: &[Vec<LogitAdjust>],
        pipes: &mut Pipelines,
    ) -> Result<(), infr_core::BackendError> {
        let rows = self.n_outputs.max(1);
        if adjust.len() > rows || adjust.iter().any(|a| a.len() > MAX_LOGIT_ADJUST) {
            return Err(infr_core::BackendError::InvalidInput(format!(
                "logit adjustments for {} rows (at most {MAX_LOGIT_ADJUST} each) on a plan of {rows} output rows",
                adjust.len()
            )));
        }
        let ti = self.top_tail(k, res, pipes)?;
        // Counts (zero for rows without adjustments), then each row's entries at its stride.
        let head = adjust_head_words(rows);
        let mut words = vec![0u32; 4 * head];
        for (r, a) in adjust.iter().enumerate() {
            words[r] = a.len() as u32;
        }
        let top = &mut self.tops[ti];
        top.adjust.write(0, bytemuck::cast_slice(&words));
        for (r, a) in adjust.iter().enumerate().filter(|(_, a)| !a.is_empty()) {
            top.adjust.write(((head + r * MAX_LOGIT_ADJUST) * 16) as u64, bytemuck::cast_slice(a));
        }
        self.launch(inp, res, self.tops[ti].cmd, false)
    }

    /// Each output row's `k` best from the last finished top-`k` run.
    pub fn read_top_k(&self, k: usize) -> Vec<Vec<(u32, f32)>> {
        let Some(top) = self.tops.iter().find(|t| t.k == k) else { return Vec::new() };
        let mut pairs = vec![[0u32; 2]; self.n_outputs * k];
        top.readback.read(0, bytemuck::cast_slice_mut(&mut pairs));
        pairs
            .chunks(k)
            .map(|row| row.iter().filter(|p| p[1] != u32::MAX).map(|p| (p[1], f32::from_bits(p[0]))).collect())
            .collect()
    }

    /// The index of the top-`k` tail, built now if needed (its buffers are the plan's).
    pub fn top_tail(
        &mut self,
        k: usize,
        res: &Resources<'_>,
        pipes: &mut Pipelines,
    ) -> Result<usize, infr_core::BackendError> {
        self.refresh(res)?;
        if let Some(i) = self.tops.iter().position(|t| t.k == k) {
            return Ok(i);
        }
        if self.tops.len() >= MAX_TOP_TAILS {
            self.drop_top(0);
        }
        let dev = self.ctx.caps.id.clone();
        let tail = self.build_top(k, res, pipes).map_err(|e| e.into_backend(&dev))?;
        self.tops.push(tail);
        Ok(self.tops.len() - 1)
    }

    /// Record the adjustments, the two top-k passes over the output rows and the copy of the
    /// winners.
    fn build_top(&self, k: usize, res: &Resources<'_>, pipes: &mut Pipelines) -> VkResult<TopKTail> {
        use crate::fused_kernels::{logit_adjust, top_k, TopKParams, TOPK_CHUNK, TOPK_E1};
        let rows = self.n_outputs.max(1);
        let chunks = (self.out_cols as u32).div_ceil(TOPK_CHUNK);
        let n2 = chunks * k as u32;
        let pass0 = pipes.get(&logit_adjust())?;
        let pass1 = pipes.get(&top_k(true, TOPK_E1))?;
        let pass2 = pipes.get(&top_k(false, n2.div_ceil(256)))?;
        let head = adjust_head_words(rows);
        let adjust_bytes = ((head + rows * MAX_LOGIT_ADJUST) * 16) as u64;
        let adjust = Buffer::new(&self.ctx, adjust_bytes, MemKind::Upload, "logit adjustments")?;
        let chunk_best = Buffer::new(&self.ctx, rows as u64 * n2 as u64 * 8, MemKind::DeviceLocal, "top-k chunks")?;
        let row_best = Buffer::new(&self.ctx, (rows * k * 8) as u64, MemKind::DeviceLocal, "top-k rows")?;
        let readback = Buffer::new(&self.ctx, (rows * k * 8) as u64, MemKind::Readback, "top-k readback")?;
        let d = &self.ctx.device;
        let last = self.act_offsets.len() - 1;
        let act = res.pool.act().ok_or_else(|| VkError::Unsupported("no activation buffer".into()))?;
        let logits = (act.raw, self.act_offsets[last], self.act_sizes[last]);
        let whole = |b: &Buffer| (b.raw, 0, b.size);
        let p0 = TopKParams {
            n_in: self.out_cols as u32,
            n_rows: rows as u32,
            k: MAX_LOGIT_ADJUST as u32,
            parts: head as u32,
        };
        let p1 = TopKParams { n_in: self.out_cols as u32, n_rows: rows as u32, k: k as u32, parts: chunks };
        let p2 = TopKParams { n_in: n2, n_rows: rows as u32, k: k as u32, parts: 1 };
        let passes = [
            (&*pass0, [logits, whole(&adjust), whole(&adjust)], p0, rows as u32),
            (&*pass1, [logits, whole(&chunk_best), whole(&chunk_best)], p1, rows as u32 * chunks),
            (&*pass2, [logits, whole(&chunk_best), whole(&row_best)], p2, rows as u32),
        ];
        // SAFETY: new objects owned by the tail (destroyed again if recording fails); the
        // command buffer is recorded once here.
        unsafe {
            let sets = passes.len() as u32;
            let sizes =
                [vk::DescriptorPoolSize::default().ty(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(3 * sets)];
            let dpinfo = vk::DescriptorPoolCreateInfo::default().max_sets(sets).pool_sizes(&sizes);
            let desc_pool = d.create_descriptor_pool(&dpinfo, None).vk("vkCreateDescriptorPool")?;
            let ainfo = vk::CommandBufferAllocateInfo::default()
                .command_pool(self.cmd_pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            let cmd = match d.allocate_command_buffers(&ainfo).vk("vkAllocateCommandBuffers") {
                Ok(c) => c[0],
                Err(e) => {
                    d.destroy_descriptor_pool(desc_pool, None);
                    return Err(e);
                }
            };
            let recorded = self.record_top(cmd, desc_pool, &passes, &row_best, &readback);
            if let Err(e) = recorded {
                d.free_command_buffers(self.cmd_pool, &[cmd]);
                d.destroy_descriptor_pool(desc_pool, None);
                return Err(e);
            }
            Ok(TopKTail { k, cmd, desc_pool, adjust, _chunk_best: chunk_best, _row_best: row_best, readback })
        }
    }

    /// Record the top-k passes and the copy of the winners into `cmd`.
    ///
    /// # Safety
    /// `cmd` is a fresh command buffer of the plan's pool and `desc_pool` has room for the
    /// passes' descriptor sets.
    unsafe fn record_top(
        &self,
        cmd: vk::CommandBuffer,
        desc_pool: vk::DescriptorPool,
        passes: &[TopKPass<'_>],
        row_best: &Buffer,
        readback: &Buffer,
    ) -> VkResult<()> {
        let d = &self.ctx.device;
        // SAFETY: per the function's contract.
        unsafe {
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).vk("vkBeginCommandBuffer")?;
            let max_x = self.ctx.caps.max_workgroup_count[0].min(65535);
            for &(pipe, bufs, params, groups) in passes {
                let layouts = [pipe.set_layout];
                let ainfo = vk::DescriptorSetAllocateInfo::default().descriptor_pool(desc_pool).set_layouts(&layouts);
                let set = d.allocate_descriptor_sets(&ainfo).vk("vkAllocateDescriptorSets")?[0];
                write_storage_set(d, set, &bufs);
                d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipe.raw);
                d.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, pipe.layout, 0, &[set], &[]);
                d.cmd_push_constants(cmd, pipe.layout, vk::ShaderStageFlags::COMPUTE, 0, bytemuck::bytes_of(&params));
                let gx = groups.clamp(1, max_x);
                d.cmd_dispatch(cmd, gx, groups.div_ceil(gx), 1);
                compute_barrier(d, cmd);
            }
            let region = [vk::BufferCopy::default().size(readback.size)];
            d.cmd_copy_buffer(cmd, row_best.raw, readback.raw, &region);
            host_read_barrier(d, cmd);
            d.end_command_buffer(cmd).vk("vkEndCommandBuffer")
        }
    }

    pub(super) fn drop_top(&mut self, i: usize) {
        let t = self.tops.remove(i);
        let d = &self.ctx.device;
        // SAFETY: every submission waited on the fence, so the tail is idle.
        unsafe {
            d.free_command_buffers(self.cmd_pool, &[t.cmd]);
            d.destroy_descriptor_pool(t.desc_pool, None);
        }
    }
}
