//! Weights on the device: repacked row chunks (each fits one storage binding) plus an f32
//! copy of 1-D weights (norm weights, biases, RoPE factors), and the KV cache buffers.

use std::sync::Arc;

use infr_core::{KvDType, KvSpec, WeightData};

use crate::device::Context;
use crate::error::{VkError, VkResult};
use crate::memory::{Buffer, MemKind, OneShot};
use crate::repack::{gpu_layout, GpuLayout};

/// One row chunk of a weight.
pub(crate) struct WeightChunk {
    pub buf: Buffer,
    /// First weight row in this chunk.
    pub row0: u32,
    /// Rows in this chunk.
    pub rows: u32,
    /// Word offset of the scale plane in `buf`.
    pub soff_words: u32,
}

/// A weight uploaded to the device.
pub(crate) struct GpuWeight {
    pub layout: GpuLayout,
    pub cols: usize,
    pub rows: usize,
    pub chunks: Vec<WeightChunk>,
    /// f32 values of a 1-D weight, or of a small float matrix (conv taps) read elementwise.
    pub vec: Option<Buffer>,
    /// The device slots of an expert tensor kept in host memory (`WeightPlace::Paged`).
    pub paged: Option<crate::expert_cache::PagedExperts>,
}

/// Float matrices up to this many elements also get an f32 copy (a convolution's taps).
const SMALL_FLOAT_ELEMS: usize = 1 << 16;

impl GpuWeight {
    /// Length of the f32 vector form, if this is a 1-D weight.
    pub fn vec_len(&self) -> Option<usize> {
        self.vec.as_ref().filter(|_| self.rows == 1).map(|_| self.cols)
    }

    /// Elements of the f32 copy (`rows * cols`), if there is one.
    pub fn vec_elems(&self) -> Option<usize> {
        self.vec.as_ref().map(|_| self.rows * self.cols)
    }
}

/// Upload `w` to the device: validate, repack, split into chunks of at most `max_range`
/// bytes per binding.
pub(crate) fn upload_weight(
    ctx: &Arc<Context>,
    one: &mut OneShot,
    w: &WeightData,
    kind: MemKind,
) -> VkResult<GpuWeight> {
    let ty = w.info.ty;
    let unsupported = |m: String| VkError::Unsupported(format!("{}: {m}", w.name));
    let layout = gpu_layout(ty)
        .ok_or_else(|| unsupported(format!("weight type {ty} is not supported by the Vulkan backend")))?;
    let cols = *w.info.dims.first().ok_or_else(|| unsupported("weight without dimensions".into()))?;
    let rows = w
        .info
        .dims
        .iter()
        .skip(1)
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(|| unsupported("shape overflows".into()))?;
    if cols == 0 || rows == 0 {
        return Err(unsupported("empty weight".into()));
    }
    // Plain-float vectors of any length are kept as f32 only (norm weights, biases).
    let small_float = !ty.is_quantized() && rows.saturating_mul(cols) <= SMALL_FLOAT_ELEMS;
    let vector_only = (rows == 1 || small_float) && !ty.is_quantized() && cols % layout.block_elems as usize != 0;
    if cols % layout.block_elems as usize != 0 && !vector_only {
        return Err(unsupported(format!(
            "row of {cols} elements is not a multiple of {} for {ty}",
            layout.block_elems
        )));
    }
    let row_bytes = ty.row_bytes(cols).ok_or_else(|| unsupported("row size overflows".into()))?;
    if row_bytes.checked_mul(rows) != Some(w.bytes.len()) {
        return Err(unsupported(format!("{} bytes do not match the shape {:?} of {ty}", w.bytes.len(), w.info.dims)));
    }
    let gpu_row = layout.gpu_row_bytes(cols);
    // Less 16 for the padding `repack` adds.
    let limit = ctx.caps.max_storage_buffer_range.min(ctx.caps.max_allocation_bytes).min(u32::MAX as u64 - 3) - 16;
    let rows_per_chunk = (limit / gpu_row.max(1)) as usize;
    if rows_per_chunk == 0 {
        return Err(VkError::Unsupported(format!("{}: one row ({gpu_row} bytes) exceeds a storage binding", w.name)));
    }
    let mut chunks = Vec::new();
    let mut row0 = if vector_only { rows } else { 0 };
    while row0 < rows {
        let n = rows_per_chunk.min(rows - row0);
        let src = &w.bytes[row0 * row_bytes..(row0 + n) * row_bytes];
        let packed = layout.repack(src);
        let mut buf = Buffer::new(ctx, packed.bytes.len() as u64, kind, &format!("weight {}", w.name))?;
        one.upload(&mut buf, 0, &packed.bytes)?;
        chunks.push(WeightChunk { buf, row0: row0 as u32, rows: n as u32, soff_words: packed.scale_word_offset });
        row0 += n;
    }
    let vec = if rows == 1 || small_float {
        let mut v = vec![0f32; cols * rows];
        infr_quant::dequantize(ty, &w.bytes, &mut v).map_err(|e| unsupported(e.to_string()))?;
        let mut buf = Buffer::new(ctx, (v.len() * 4) as u64, kind, &format!("vector {}", w.name))?;
        one.upload(&mut buf, 0, bytemuck::cast_slice(&v))?;
        Some(buf)
    } else {
        None
    };
    Ok(GpuWeight { layout, cols, rows, chunks, vec, paged: None })
}

/// The KV cache: per layer one K and one V buffer of `slots × width` elements.
pub(crate) struct KvCache {
    pub spec: KvSpec,
    pub k: Vec<Buffer>,
    pub v: Vec<Buffer>,
    /// One buffer per recurrent state layer: `n_state_slots` blocks of `floats` f32.
    pub state: Vec<Buffer>,
    /// Bytes of K/V layers placed in host memory because the device had no room.
    pub host_bytes: u64,
}

impl KvCache {
    /// Bytes of one cache slot of `width` elements. A q8_0 slot is the GPU layout of
    /// `kv_defines`: the int8 quants (4 per word), then one f32 scale per 32 (f16-rounded, as
    /// ggml's q8_0 blocks hold them).
    fn slot_bytes(dtype: KvDType, width: u64) -> u64 {
        match dtype {
            KvDType::F16 => 2 * width,
            KvDType::F32 => 4 * width,
            KvDType::Q8_0 => width + width / 8,
        }
    }

    /// Allocate (zeroed) cache buffers; with `spill`, a K/V layer the device has no room for
    /// goes to host memory the kernels read across the bus, instead of failing.
    pub fn new(ctx: &Arc<Context>, one: &mut OneShot, spec: &KvSpec, spill: bool) -> VkResult<Self> {
        if spec.dtype == KvDType::Q8_0 {
            if let Some(l) = spec.layers.iter().find(|l| l.head_dim_k % 32 != 0 || l.head_dim_v % 32 != 0) {
                return Err(VkError::Unsupported(format!(
                    "a q8_0 KV cache needs head dims that are multiples of 32 (not {} / {})",
                    l.head_dim_k, l.head_dim_v
                )));
            }
        }
        let limit = ctx.caps.max_storage_buffer_range;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        let mut host_bytes = 0;
        // Spilling, the cache leaves the plans (activations, temporaries) room on the device.
        let device_room = {
            let caps = &ctx.caps;
            let heap = caps.budget_bytes.unwrap_or(caps.device_local_bytes);
            let limit = ctx.device_limit.load(std::sync::atomic::Ordering::Relaxed);
            let total = if limit > 0 { limit.min(caps.device_local_bytes) } else { heap };
            total.saturating_sub((total / 32).max(64 << 20).min(total / 4))
        };
        for (i, l) in spec.layers.iter().enumerate() {
            let pages = if l.window.is_some() { spec.n_window_pages } else { spec.n_pages };
            let slots = pages as u64 * spec.page_size as u64;
            for (which, d, out) in [("K", l.head_dim_k, &mut k), ("V", l.head_dim_v, &mut v)] {
                let bytes = slots * Self::slot_bytes(spec.dtype, (l.n_kv_head * d) as u64);
                if bytes > limit {
                    return Err(VkError::OutOfMemory {
                        what: format!("KV layer {i} {which} (larger than a storage binding: {limit})"),
                        bytes,
                    });
                }
                let what = format!("KV layer {i} {which}");
                let held = ctx.device_bytes.load(std::sync::atomic::Ordering::Relaxed);
                let on_device = if spill && held + bytes > device_room {
                    Err(VkError::OutOfMemory { what: what.clone(), bytes })
                } else {
                    Buffer::new(ctx, bytes, MemKind::DeviceLocal, &what)
                };
                let buf = match on_device {
                    Err(VkError::OutOfMemory { .. }) if spill => {
                        host_bytes += bytes;
                        Buffer::new(ctx, bytes, MemKind::HostSpill, &format!("{what} (in host memory)"))?
                    }
                    r => r?,
                };
                let raw = buf.raw;
                // SAFETY: the buffer is valid and idle; fill covers its whole size.
                one.run(|d, cmd| unsafe { d.cmd_fill_buffer(cmd, raw, 0, ash::vk::WHOLE_SIZE, 0) })?;
                out.push(buf);
            }
        }
        let mut state = Vec::new();
        for (i, l) in spec.states.iter().enumerate() {
            let bytes = (l.floats as u64 * spec.n_state_slots as u64 * 4).max(4);
            if bytes > limit {
                return Err(VkError::OutOfMemory {
                    what: format!("state layer {i} (larger than a storage binding: {limit})"),
                    bytes,
                });
            }
            let buf = Buffer::new(ctx, bytes, MemKind::DeviceLocal, &format!("state layer {i}"))?;
            let raw = buf.raw;
            // SAFETY: the buffer is valid and idle; fill covers its whole size.
            one.run(|d, cmd| unsafe { d.cmd_fill_buffer(cmd, raw, 0, ash::vk::WHOLE_SIZE, 0) })?;
            state.push(buf);
        }
        Ok(Self { spec: spec.clone(), k, v, state, host_bytes })
    }

    /// Copy state slots `src → dst` in every state layer, pair by pair.
    pub fn copy_state(&self, one: &mut OneShot, pairs: &[(u32, u32)]) -> VkResult<()> {
        let bufs: Vec<(ash::vk::Buffer, u64)> =
            self.state.iter().zip(&self.spec.states).map(|(b, l)| (b.raw, l.floats as u64 * 4)).collect();
        one.run(|d, cmd| {
            for &(s, t) in pairs {
                if s == t {
                    continue;
                }
                for &(raw, slot_bytes) in bufs.iter().filter(|b| b.1 > 0) {
                    let r = [ash::vk::BufferCopy::default()
                        .src_offset(s as u64 * slot_bytes)
                        .dst_offset(t as u64 * slot_bytes)
                        .size(slot_bytes)];
                    // SAFETY: both slots lie inside the buffer (checked by the caller) and
                    // differ, so the regions do not overlap.
                    unsafe { d.cmd_copy_buffer(cmd, raw, raw, &r) };
                }
                crate::memory::compute_barrier(d, cmd);
            }
        })
    }

    /// Copy whole context pages `src → dst` in every layer that uses them (not the windowed
    /// layers' rings), pair by pair (later pairs see earlier copies).
    pub fn copy_pages(&self, one: &mut OneShot, pairs: &[(u32, u32)]) -> VkResult<()> {
        let dt = self.spec.dtype;
        let ps = self.spec.page_size as u64;
        let mut bufs = Vec::new();
        for (l, spec) in self.spec.layers.iter().enumerate().filter(|(_, s)| s.window.is_none()) {
            bufs.push((self.k[l].raw, ps * Self::slot_bytes(dt, (spec.n_kv_head * spec.head_dim_k) as u64)));
            bufs.push((self.v[l].raw, ps * Self::slot_bytes(dt, (spec.n_kv_head * spec.head_dim_v) as u64)));
        }
        one.run(|d, cmd| {
            for &(s, t) in pairs {
                if s == t {
                    continue;
                }
                for &(raw, page_bytes) in &bufs {
                    let r = [ash::vk::BufferCopy::default()
                        .src_offset(s as u64 * page_bytes)
                        .dst_offset(t as u64 * page_bytes)
                        .size(page_bytes)];
                    // SAFETY: both pages lie inside the buffer (checked by the caller) and differ,
                    // so the regions do not overlap.
                    unsafe { d.cmd_copy_buffer(cmd, raw, raw, &r) };
                }
                crate::memory::compute_barrier(d, cmd);
            }
        })
    }
}
