//! Buffers and their memory: device-local storage for weights, KV cache and activations,
//! host-visible memory for step inputs, staging and readback, and one-shot transfers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ash::vk;

use crate::device::Context;
use crate::error::{CallExt, VkError, VkResult};

/// Where a buffer's memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemKind {
    /// Fast device memory (host-visible too when the device offers it, e.g. unified memory).
    DeviceLocal,
    /// Host-visible, coherent memory the GPU reads (step inputs, staging).
    Upload,
    /// Host-visible memory the host reads back (cached when possible).
    Readback,
    /// System memory the GPU reads and writes across the bus: where KV cache layers go when
    /// the device's budget is spent (`kv.spill_to_host`). Not counted against that budget.
    HostSpill,
}

/// A buffer bound to its own memory allocation.
pub struct Buffer {
    ctx: Arc<Context>,
    /// The Vulkan buffer.
    pub raw: vk::Buffer,
    mem: vk::DeviceMemory,
    /// Size in bytes.
    pub size: u64,
    mapped: Option<std::ptr::NonNull<u8>>,
    coherent: bool,
    /// Bytes counted against the context's device-memory limit (device-local buffers).
    counted: u64,
}

// SAFETY: the mapped pointer refers to memory owned by this buffer; access goes through `&mut`
// (writes) or `&` with the device idle (reads), so moving the buffer between threads is sound.
unsafe impl Send for Buffer {}
// SAFETY: shared references only read the mapping (see `read`), never concurrently with writes.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Allocate a storage buffer of `size` bytes (`what` names it in errors).
    pub fn new(ctx: &Arc<Context>, size: u64, kind: MemKind, what: &str) -> VkResult<Self> {
        let size = size.max(16);
        if size > ctx.caps.max_allocation_bytes {
            return Err(VkError::OutOfMemory {
                what: format!("{what} (larger than one allocation may be: {})", ctx.caps.max_allocation_bytes),
                bytes: size,
            });
        }
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::TRANSFER_SRC
            | vk::BufferUsageFlags::TRANSFER_DST;
        let info = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
        let d = &ctx.device;
        // SAFETY: valid device and create info.
        let raw = unsafe { d.create_buffer(&info, None) }.vk("vkCreateBuffer")?;
        // SAFETY: `raw` was just created on this device.
        let req = unsafe { d.get_buffer_memory_requirements(raw) };
        use vk::MemoryPropertyFlags as F;
        let choices: &[F] = match kind {
            MemKind::DeviceLocal => {
                &[F::DEVICE_LOCAL | F::HOST_VISIBLE | F::HOST_COHERENT, F::DEVICE_LOCAL, F::empty()]
            }
            MemKind::Upload | MemKind::HostSpill => &[F::HOST_VISIBLE | F::HOST_COHERENT],
            MemKind::Readback => {
                &[F::HOST_VISIBLE | F::HOST_COHERENT | F::HOST_CACHED, F::HOST_VISIBLE | F::HOST_COHERENT]
            }
        };
        // Candidate memory types in order of preference. Host-visible device memory is taken
        // only from a heap about as large as the device's (ReBAR, unified memory), never a
        // small BAR window; an allocation that fails there falls back to the next candidate.
        let big_heap = |t: u32| {
            let heap = ctx.memory.memory_types[t as usize].heap_index as usize;
            ctx.memory.memory_heaps[heap].size.saturating_mul(2) >= ctx.caps.device_local_bytes
        };
        let mut candidates: Vec<u32> = Vec::new();
        // Spilled memory prefers types that are not device memory (the point is to use
        // another pool); where every type is device-local (unified memory, lavapipe), any.
        if kind == MemKind::HostSpill {
            for t in 0..ctx.memory.memory_type_count {
                let flags = ctx.memory.memory_types[t as usize].property_flags;
                if req.memory_type_bits & (1 << t) != 0
                    && flags.contains(F::HOST_VISIBLE | F::HOST_COHERENT)
                    && !flags.contains(F::DEVICE_LOCAL)
                {
                    candidates.push(t);
                }
            }
        }
        for &f in choices {
            for t in 0..ctx.memory.memory_type_count {
                let flags = ctx.memory.memory_types[t as usize].property_flags;
                let host_dev = flags.contains(F::DEVICE_LOCAL | F::HOST_VISIBLE) && kind == MemKind::DeviceLocal;
                if req.memory_type_bits & (1 << t) != 0
                    && flags.contains(f)
                    && (!host_dev || big_heap(t))
                    && !candidates.contains(&t)
                {
                    candidates.push(t);
                }
            }
        }
        // The context's own limit (`VulkanOptions::memory_limit`) on device-local bytes.
        let counted = if kind == MemKind::DeviceLocal { req.size } else { 0 };
        let limit = ctx.device_limit.load(Ordering::Relaxed);
        let held = ctx.device_bytes.fetch_add(counted, Ordering::Relaxed);
        if limit > 0 && held + counted > limit {
            ctx.device_bytes.fetch_sub(counted, Ordering::Relaxed);
            // SAFETY: the buffer is unused.
            unsafe { d.destroy_buffer(raw, None) };
            return Err(VkError::OutOfMemory {
                what: format!("{what} ({held} of the {limit} bytes allowed in use)"),
                bytes: req.size,
            });
        }
        let mut last_err = VkError::Unsupported(format!("no memory type for {what} ({kind:?})"));
        let mut found = None;
        for &ty in &candidates {
            let ainfo = vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ty);
            // SAFETY: valid allocate info.
            match unsafe { d.allocate_memory(&ainfo, None) } {
                Ok(m) => {
                    found = Some((m, ty));
                    break;
                }
                Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY) => {
                    last_err = VkError::OutOfMemory { what: what.to_owned(), bytes: req.size };
                }
                Err(r) => last_err = VkError::call("vkAllocateMemory", r),
            }
        }
        let Some((mem, ty)) = found else {
            ctx.device_bytes.fetch_sub(counted, Ordering::Relaxed);
            // SAFETY: the buffer is unused.
            unsafe { d.destroy_buffer(raw, None) };
            return Err(last_err);
        };
        let flags = ctx.memory.memory_types[ty as usize].property_flags;
        let mut buf = Self {
            ctx: ctx.clone(),
            raw,
            mem,
            size,
            mapped: None,
            coherent: flags.contains(F::HOST_COHERENT),
            counted,
        };
        // SAFETY: memory and buffer belong to this device; the memory type satisfies the requirements.
        unsafe { d.bind_buffer_memory(raw, mem, 0) }.vk("vkBindBufferMemory")?;
        if flags.contains(F::HOST_VISIBLE) {
            // SAFETY: host-visible memory, mapped once for the buffer's lifetime.
            let p = unsafe { d.map_memory(mem, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()) }.vk("vkMapMemory")?;
            buf.mapped = std::ptr::NonNull::new(p as *mut u8);
        }
        Ok(buf)
    }

    /// Whether the host can write and read this buffer directly.
    pub fn is_mapped(&self) -> bool {
        self.mapped.is_some()
    }

    /// Write `data` at byte `offset` through the mapping (the buffer must be mapped and idle).
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let p = self.mapped.expect("write to an unmapped buffer");
        assert!(offset + data.len() as u64 <= self.size, "buffer write out of range");
        // SAFETY: the range lies inside the mapping (checked above) and the GPU is not using it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr().add(offset as usize), data.len()) };
        if !self.coherent {
            let r = vk::MappedMemoryRange::default().memory(self.mem).offset(0).size(vk::WHOLE_SIZE);
            // SAFETY: valid mapped range.
            let _ = unsafe { self.ctx.device.flush_mapped_memory_ranges(&[r]) };
        }
    }

    /// Read `out.len()` bytes at `offset` through the mapping (the GPU must be done with it).
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        let p = self.mapped.expect("read from an unmapped buffer");
        assert!(offset + out.len() as u64 <= self.size, "buffer read out of range");
        if !self.coherent {
            let r = vk::MappedMemoryRange::default().memory(self.mem).offset(0).size(vk::WHOLE_SIZE);
            // SAFETY: valid mapped range.
            let _ = unsafe { self.ctx.device.invalidate_mapped_memory_ranges(&[r]) };
        }
        // SAFETY: the range lies inside the mapping and no GPU work writes it now.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr().add(offset as usize), out.as_mut_ptr(), out.len()) };
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the owner guarantees the GPU no longer uses the buffer (plans wait on their
        // fences; the backend waits for idle before dropping).
        unsafe {
            if self.mapped.is_some() {
                self.ctx.device.unmap_memory(self.mem);
            }
            self.ctx.device.destroy_buffer(self.raw, None);
            self.ctx.device.free_memory(self.mem, None);
        }
        self.ctx.device_bytes.fetch_sub(self.counted, Ordering::Relaxed);
    }
}

/// A command pool with one reusable command buffer and fence for synchronous work (uploads,
/// page copies, load-time kernels).
pub struct OneShot {
    ctx: Arc<Context>,
    pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    staging: Option<Buffer>,
}

/// Staging chunk for uploads to device memory the host cannot map.
const STAGING_BYTES: u64 = 64 << 20;

impl OneShot {
    /// Create the pool, command buffer and fence.
    pub fn new(ctx: &Arc<Context>) -> VkResult<Self> {
        let d = &ctx.device;
        let pinfo = vk::CommandPoolCreateInfo::default()
            .queue_family_index(ctx.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid device and create infos.
        unsafe {
            let pool = d.create_command_pool(&pinfo, None).vk("vkCreateCommandPool")?;
            let ainfo = vk::CommandBufferAllocateInfo::default()
                .command_pool(pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            let cmd = d.allocate_command_buffers(&ainfo).vk("vkAllocateCommandBuffers")?[0];
            let fence = d.create_fence(&vk::FenceCreateInfo::default(), None).vk("vkCreateFence")?;
            Ok(Self { ctx: ctx.clone(), pool, cmd, fence, staging: None })
        }
    }

    /// Record commands with `f`, submit them and wait.
    pub fn run(&mut self, f: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> VkResult<()> {
        let d = &self.ctx.device;
        // SAFETY: the command buffer is idle (every previous run waited on the fence).
        unsafe {
            d.reset_command_buffer(self.cmd, vk::CommandBufferResetFlags::empty()).vk("vkResetCommandBuffer")?;
            let begin = vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            d.begin_command_buffer(self.cmd, &begin).vk("vkBeginCommandBuffer")?;
            f(d, self.cmd);
            d.end_command_buffer(self.cmd).vk("vkEndCommandBuffer")?;
            let cmds = [self.cmd];
            let submit = [vk::SubmitInfo::default().command_buffers(&cmds)];
            d.queue_submit(self.ctx.queue, &submit, self.fence).vk("vkQueueSubmit")?;
            d.wait_for_fences(&[self.fence], true, u64::MAX).vk("vkWaitForFences")?;
            d.reset_fences(&[self.fence]).vk("vkResetFences")?;
        }
        Ok(())
    }

    /// Copy `out.len()` bytes of `src` at `offset` into `out` (through a readback buffer
    /// unless `src` is mapped); the device must be done writing `src`.
    pub fn download(&mut self, src: &Buffer, offset: u64, out: &mut [u8]) -> VkResult<()> {
        if src.is_mapped() {
            src.read(offset, out);
            return Ok(());
        }
        let back = Buffer::new(&self.ctx, out.len() as u64, MemKind::Readback, "readback")?;
        let region = vk::BufferCopy::default().src_offset(offset).dst_offset(0).size(out.len() as u64);
        let (s, b) = (src.raw, back.raw);
        // SAFETY: both buffers are valid and the regions lie inside them.
        self.run(|d, cmd| unsafe { d.cmd_copy_buffer(cmd, s, b, &[region]) })?;
        back.read(0, out);
        Ok(())
    }

    /// Copy `data` into `dst` at `offset`, directly when mapped, else through staging.
    pub fn upload(&mut self, dst: &mut Buffer, offset: u64, data: &[u8]) -> VkResult<()> {
        if dst.is_mapped() {
            dst.write(offset, data);
            return Ok(());
        }
        if self.staging.is_none() {
            self.staging = Some(Buffer::new(&self.ctx, STAGING_BYTES, MemKind::Upload, "staging buffer")?);
        }
        for (i, chunk) in data.chunks(STAGING_BYTES as usize).enumerate() {
            let staging = self.staging.as_mut().expect("staging allocated");
            staging.write(0, chunk);
            let (src, dst_raw) = (staging.raw, dst.raw);
            let region = vk::BufferCopy::default()
                .src_offset(0)
                .dst_offset(offset + (i as u64) * STAGING_BYTES)
                .size(chunk.len() as u64);
            // SAFETY: both buffers are valid and the regions lie inside them.
            self.run(|d, cmd| unsafe { d.cmd_copy_buffer(cmd, src, dst_raw, &[region]) })?;
        }
        Ok(())
    }
}

impl Drop for OneShot {
    fn drop(&mut self) {
        // SAFETY: every submission waited on the fence, so nothing is in flight.
        unsafe {
            self.ctx.device.destroy_fence(self.fence, None);
            self.ctx.device.destroy_command_pool(self.pool, None);
        }
    }
}

/// A full memory barrier between compute dispatches (and transfers).
pub fn compute_barrier(d: &ash::Device, cmd: vk::CommandBuffer) {
    let b = [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_READ,
        )];
    let stages = vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER;
    // SAFETY: recording into a command buffer in the recording state.
    unsafe { d.cmd_pipeline_barrier(cmd, stages, stages, vk::DependencyFlags::empty(), &b, &[], &[]) };
}
