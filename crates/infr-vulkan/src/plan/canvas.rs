//! The embedding mixture of a diffusion plan and its device-side canvas sampler.
//!
//! The mixture (`Op::MixEmbed`'s probabilities, `n_tokens` rows of the vocabulary) lives in
//! device memory: a step either zeroes its flag (no mixture), copies one the host gave through
//! a staging buffer, or keeps what the previous canvas sample of the plan wrote there. The
//! canvas tail (`canvas_sample.wgsl`, three passes) samples every output row after the plan's
//! dispatches and reads back 16 bytes per row instead of a row of logits: for DiffusionGemma's
//! 256 x 262,144 canvases that is 4 KiB instead of 268 MB each way per step.

use ash::vk;
use bytemuck::{Pod, Zeroable};
use infr_core::{BackendError, CanvasDraw, CanvasSampleInputs, StepInputs};

use super::{host_read_barrier, write_storage_set, Plan, Resources};
use crate::error::{CallExt, VkError, VkResult};
use crate::kernels::push_size;
use crate::memory::{compute_barrier, Buffer, MemKind};
use crate::pipeline::{KernelSpec, Pipelines};
use crate::profile::Profile;

/// Logits each invocation of `canvas_sample.wgsl` takes per chunk (a chunk is 256 of them).
const CANVAS_E: u32 = 16;
const CANVAS_CHUNK: u32 = CANVAS_E * 256;

/// Push constants of `canvas_sample.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CanvasParams {
    pub n_vocab: u32,
    pub n_rows: u32,
    pub chunks: u32,
}

/// Pass `pass` (1: chunk stats, 2: probabilities, 3: per-row entropy, argmax and draw) of the
/// canvas sampler. Bindings: logits, chunk stats, mixture, temperature + uniforms, output.
pub fn canvas_sample(pass: u32) -> KernelSpec {
    KernelSpec::new(format!("canvas_sample.{pass}"), &["common", "canvas_sample"], 5, push_size::<CanvasParams>())
        .define("E", CANVAS_E)
        .define("PASS", pass)
}

/// The device copy of the embedding mixture and what fills it before a step.
pub(super) struct Mixture {
    pub buf: Buffer,
    pub vocab: usize,
    /// Host mixtures are staged here (made on first use) and copied by `copy_cmd`.
    upload: Option<(Buffer, vk::CommandBuffer)>,
    /// Zeroes the flag word (a step without a mixture).
    zero_cmd: Option<vk::CommandBuffer>,
    /// Whether the last step left probabilities a next step may reuse.
    sampled: bool,
}

impl Mixture {
    /// A mixture buffer of `bytes` (the flag word and the rows) over a vocabulary of `vocab`.
    pub fn new(ctx: &std::sync::Arc<crate::device::Context>, bytes: u64, vocab: usize) -> VkResult<Self> {
        let buf = Buffer::new(ctx, bytes, MemKind::DeviceLocal, "embedding mixture")?;
        Ok(Self { buf, vocab, upload: None, zero_cmd: None, sampled: false })
    }
}

/// The canvas sampler's passes and buffers, built on a plan's first canvas sample.
pub(super) struct CanvasTail {
    cmd: vk::CommandBuffer,
    desc_pool: vk::DescriptorPool,
    _parts: Buffer,
    _out: Buffer,
    input: Buffer,
    readback: Buffer,
}

impl Plan {
    /// The command buffer that prepares the mixture for a step (`None`: the plan has none),
    /// after checking the step's mixture against the plan.
    pub(super) fn mix_prologue(
        &mut self,
        inp: &StepInputs<'_>,
        reuse: bool,
    ) -> Result<Option<vk::CommandBuffer>, BackendError> {
        let n_tokens = self.n_tokens;
        let Some(mix) = &mut self.mix else {
            if reuse || !inp.embed_mix.is_empty() {
                return Err(BackendError::InvalidInput("this plan has no embedding mixture".into()));
            }
            return Ok(None);
        };
        let given = !inp.embed_mix.is_empty();
        if given && inp.embed_mix.len() != n_tokens * mix.vocab {
            return Err(BackendError::InvalidInput(format!(
                "embedding mixture has {} values, expected {n_tokens} rows of {}",
                inp.embed_mix.len(),
                mix.vocab
            )));
        }
        if reuse {
            if given || !mix.sampled {
                return Err(BackendError::InvalidInput(
                    "reusing the device mixture needs a previous canvas sample and no host mixture".into(),
                ));
            }
            return Ok(None);
        }
        mix.sampled = false;
        let dev = self.ctx.caps.id.clone();
        let e = |err: VkError| err.into_backend(&dev);
        let (ctx, pool) = (&self.ctx, self.cmd_pool);
        if given {
            if mix.upload.is_none() {
                let up = Buffer::new(ctx, mix.buf.size, MemKind::Upload, "embedding mixture upload").map_err(e)?;
                let cmd = record_one(ctx, pool, |d, cmd| {
                    let region = [vk::BufferCopy::default().size(mix.buf.size)];
                    // SAFETY: recording a fresh command buffer; both buffers outlive it.
                    unsafe { d.cmd_copy_buffer(cmd, up.raw, mix.buf.raw, &region) };
                })
                .map_err(e)?;
                mix.upload = Some((up, cmd));
            }
            let (up, cmd) = mix.upload.as_mut().expect("made above");
            up.write(0, &1u32.to_le_bytes());
            up.write(4, bytemuck::cast_slice(inp.embed_mix));
            return Ok(Some(*cmd));
        }
        if mix.zero_cmd.is_none() {
            let raw = mix.buf.raw;
            // SAFETY (closure): recording a fresh command buffer; the buffer outlives it.
            mix.zero_cmd =
                Some(record_one(ctx, pool, |d, cmd| unsafe { d.cmd_fill_buffer(cmd, raw, 0, 4, 0) }).map_err(e)?);
        }
        Ok(mix.zero_cmd)
    }

    /// Run the plan, then sample every output row on the device (see the module doc).
    pub fn execute_canvas_sample(
        &mut self,
        inp: &StepInputs<'_>,
        res: &Resources<'_>,
        prof: Option<&mut Profile>,
        s: &CanvasSampleInputs<'_>,
        pipes: &mut Pipelines,
    ) -> Result<Vec<CanvasDraw>, BackendError> {
        let rows = self.n_outputs;
        let bad = |m: String| Err(BackendError::InvalidInput(m));
        match &self.mix {
            Some(m) if m.vocab == self.out_cols && rows == self.n_tokens => {}
            _ => {
                return bad(
                    "canvas sampling needs a plan whose every row is an output over its mixture's vocabulary".into()
                )
            }
        }
        if inp.output_rows.iter().enumerate().any(|(i, &r)| r as usize != i) {
            return bad("canvas sampling needs the token rows as output rows, in order".into());
        }
        if s.uniforms.len() != rows || s.temperature.is_nan() || s.temperature <= 0.0 {
            return bad(format!("canvas sampling needs {rows} uniforms and a positive temperature"));
        }
        self.prepare_canvas(res, pipes)?;
        let tail = self.canvas.as_mut().expect("built above");
        let mut words = Vec::with_capacity(rows + 1);
        words.push(s.temperature);
        // A uniform that f32 rounds up to 1 would fall past the last token.
        words.extend(s.uniforms.iter().map(|&u| u.clamp(0.0, 1.0 - f32::EPSILON / 2.0)));
        tail.input.write(0, bytemuck::cast_slice(&words));
        let cmd = tail.cmd;
        self.submit(inp, res, prof, cmd, s.reuse_mix)?;
        let tail = self.canvas.as_ref().expect("built above");
        let mut out = vec![[0u32; 4]; rows];
        tail.readback.read(0, bytemuck::cast_slice_mut(&mut out));
        if let Some(m) = &mut self.mix {
            m.sampled = true;
        }
        Ok(out.iter().map(|o| CanvasDraw { entropy: f32::from_bits(o[0]), argmax: o[1], sample: o[2] }).collect())
    }

    /// Build the canvas tail now if the plan has none (recording the plan again first if its
    /// resources changed).
    pub fn prepare_canvas(&mut self, res: &Resources<'_>, pipes: &mut Pipelines) -> Result<(), BackendError> {
        self.refresh(res)?;
        if self.canvas.is_none() {
            let dev = self.ctx.caps.id.clone();
            self.canvas = Some(self.build_canvas(res, pipes).map_err(|e| e.into_backend(&dev))?);
        }
        Ok(())
    }

    /// Record the three sampler passes and the copy of their per-row results.
    fn build_canvas(&self, res: &Resources<'_>, pipes: &mut Pipelines) -> VkResult<CanvasTail> {
        let rows = self.n_outputs as u32;
        let chunks = (self.out_cols as u32).div_ceil(CANVAS_CHUNK);
        let params = CanvasParams { n_vocab: self.out_cols as u32, n_rows: rows, chunks };
        let mix = self.mix.as_ref().ok_or_else(|| VkError::Unsupported("no embedding mixture".into()))?;
        let parts = Buffer::new(&self.ctx, rows as u64 * chunks as u64 * 5 * 4, MemKind::DeviceLocal, "canvas stats")?;
        let out = Buffer::new(&self.ctx, rows as u64 * 16, MemKind::DeviceLocal, "canvas draws")?;
        let input = Buffer::new(&self.ctx, (rows as u64 + 1) * 4, MemKind::Upload, "canvas uniforms")?;
        let readback = Buffer::new(&self.ctx, rows as u64 * 16, MemKind::Readback, "canvas readback")?;
        let last = self.act_offsets.len() - 1;
        let act = res.pool.act().ok_or_else(|| VkError::Unsupported("no activation buffer".into()))?;
        let whole = |b: &Buffer| (b.raw, 0, b.size);
        let bufs = [
            (act.raw, self.act_offsets[last], self.act_sizes[last]),
            whole(&parts),
            whole(&mix.buf),
            whole(&input),
            whole(&out),
        ];
        let mut passes = Vec::new();
        for (pass, groups) in [(1, rows * chunks), (2, rows * chunks), (3, rows)] {
            passes.push((pipes.get(&canvas_sample(pass))?, groups));
        }
        let d = &self.ctx.device;
        let max_x = self.ctx.caps.max_workgroup_count[0].min(65535);
        let sizes = [vk::DescriptorPoolSize::default().ty(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(15)];
        let dpinfo = vk::DescriptorPoolCreateInfo::default().max_sets(3).pool_sizes(&sizes);
        // SAFETY: valid create info; the pool is owned by the tail (or destroyed on failure).
        let desc_pool = unsafe { d.create_descriptor_pool(&dpinfo, None) }.vk("vkCreateDescriptorPool")?;
        let allocated = (|| {
            let layouts: Vec<_> = passes.iter().map(|(p, _)| p.set_layout).collect();
            let ainfo = vk::DescriptorSetAllocateInfo::default().descriptor_pool(desc_pool).set_layouts(&layouts);
            // SAFETY: the pool has room for the three sets.
            let sets = unsafe { d.allocate_descriptor_sets(&ainfo) }.vk("vkAllocateDescriptorSets")?;
            for &set in &sets {
                write_storage_set(d, set, &bufs);
            }
            record_one(&self.ctx, self.cmd_pool, |d, cmd| {
                // SAFETY: recording a fresh command buffer with the sets just written.
                unsafe {
                    for ((pipe, groups), set) in passes.iter().zip(&sets) {
                        d.cmd_bind_pipeline(cmd, vk::PipelineBindPoint::COMPUTE, pipe.raw);
                        d.cmd_bind_descriptor_sets(cmd, vk::PipelineBindPoint::COMPUTE, pipe.layout, 0, &[*set], &[]);
                        let pc = bytemuck::bytes_of(&params);
                        d.cmd_push_constants(cmd, pipe.layout, vk::ShaderStageFlags::COMPUTE, 0, pc);
                        let gx = (*groups).clamp(1, max_x);
                        d.cmd_dispatch(cmd, gx, groups.div_ceil(gx), 1);
                        compute_barrier(d, cmd);
                    }
                    let region = [vk::BufferCopy::default().size(readback.size)];
                    d.cmd_copy_buffer(cmd, out.raw, readback.raw, &region);
                    host_read_barrier(d, cmd);
                }
            })
        })();
        let recorded = allocated;
        match recorded {
            Ok(cmd) => Ok(CanvasTail { cmd, desc_pool, _parts: parts, _out: out, input, readback }),
            Err(e) => {
                // SAFETY: nothing recorded with the pool was submitted.
                unsafe { d.destroy_descriptor_pool(desc_pool, None) };
                Err(e)
            }
        }
    }

    /// Free the canvas tail (the plan is idle; it is built again on next use).
    pub(super) fn drop_canvas_tail(&mut self) {
        if let Some(t) = self.canvas.take() {
            let d = &self.ctx.device;
            // SAFETY: every submission waited on the plan's fence, so the tail is idle.
            unsafe {
                d.free_command_buffers(self.cmd_pool, &[t.cmd]);
                d.destroy_descriptor_pool(t.desc_pool, None);
            }
        }
    }

    /// Free the mixture's command buffers (the plan is idle).
    pub(super) fn drop_mixture_cmds(&mut self) {
        let Some(m) = &mut self.mix else { return };
        let cmds: Vec<_> = m.zero_cmd.take().into_iter().chain(m.upload.take().map(|u| u.1)).collect();
        if !cmds.is_empty() {
            // SAFETY: every submission waited on the plan's fence, so none is in flight.
            unsafe { self.ctx.device.free_command_buffers(self.cmd_pool, &cmds) };
        }
    }
}

/// Allocate a primary command buffer from `pool` and record `body` into it, ending with a
/// barrier that makes its writes visible to the dispatches after it.
fn record_one(
    ctx: &crate::device::Context,
    pool: vk::CommandPool,
    body: impl FnOnce(&ash::Device, vk::CommandBuffer),
) -> VkResult<vk::CommandBuffer> {
    let d = &ctx.device;
    let ainfo = vk::CommandBufferAllocateInfo::default()
        .command_pool(pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: valid pool; the buffer is recorded once here and freed with the pool or by
    // `drop_canvas`.
    unsafe {
        let cmd = d.allocate_command_buffers(&ainfo).vk("vkAllocateCommandBuffers")?[0];
        let recorded = (|| {
            d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).vk("vkBeginCommandBuffer")?;
            body(d, cmd);
            compute_barrier(d, cmd);
            d.end_command_buffer(cmd).vk("vkEndCommandBuffer")
        })();
        if let Err(e) = recorded {
            d.free_command_buffers(pool, &[cmd]);
            return Err(e);
        }
        Ok(cmd)
    }
}
