//! The expert cache (`WeightPlace::Paged`): a MoE layer's expert tensors stay whole in host
//! memory, and each has a device buffer of `slots` expert-sized slots. Before a step's expert
//! matmuls, `moe_cache.wgsl` gives every routed expert a slot (least recently used out first;
//! the layer's slot table lives on the device, so routing never goes back to the host) and
//! `moe_fetch.wgsl` copies the missing experts in; the matmuls then read the slots, unchanged.
//! A step with more routed pairs than slots reads host memory directly.

use std::sync::Arc;

use bytemuck::{Pod, Zeroable};

use crate::device::Context;
use crate::error::{VkError, VkResult};
use crate::kernels::push_size;
use crate::memory::{Buffer, MemKind, OneShot};
use crate::pipeline::KernelSpec;
use crate::weights::GpuWeight;

/// Words of a slot table before its per-slot and per-expert parts (stamp, hits, misses).
const TABLE_HEAD: usize = 4;

/// Most experts of a paged layer (`moe_cache.wgsl` keeps its table in workgroup memory).
pub const CACHE_MAX_EXPERTS: u32 = 512;

/// Words one `moe_fetch` workgroup copies.
pub const FETCH_PIECE: u32 = 4096;

/// The device side of a paged expert tensor.
pub(crate) struct PagedExperts {
    pub n_expert: u32,
    pub slots: u32,
    /// `slots` experts in the tensor's repacked layout: quant plane, then scale plane.
    pub buf: Buffer,
    /// Word offset of the slot buffer's scale plane.
    pub soff_words: u32,
    /// Words of one expert in the quant plane and in the scale plane.
    pub q_words: u32,
    pub s_words: u32,
    /// The LRU state `moe_cache.wgsl` keeps (see there); the layer's first expert tensor's
    /// table decides for all of the layer's tensors.
    pub table: Buffer,
}

impl PagedExperts {
    /// Slots for `w` (uploaded to host memory as one chunk) of `n_expert` experts; `None`
    /// where its planes do not split into whole words per expert (it stays read from host
    /// memory).
    pub fn new(
        ctx: &Arc<Context>,
        one: &mut OneShot,
        w: &GpuWeight,
        n_expert: u32,
        slots: u32,
        name: &str,
    ) -> VkResult<Option<Self>> {
        let (e, s) = (n_expert as usize, slots as usize);
        if w.chunks.len() != 1 || e == 0 || w.rows % e != 0 || s == 0 || s >= e || e > CACHE_MAX_EXPERTS as usize {
            return Ok(None);
        }
        let blocks = (w.rows / e) * w.layout.blocks_per_row(w.cols);
        let (q_bytes, s_bytes) = (blocks * w.layout.qw as usize * 4, blocks * w.layout.sb as usize);
        if s_bytes % 4 != 0 {
            return Ok(None);
        }
        let too_big =
            |b: usize| u32::try_from(b / 4).map_err(|_| VkError::Unsupported(format!("{name}: expert slots")));
        let (q_words, s_words) = (too_big(q_bytes)?, too_big(s_bytes)?);
        let soff_words = too_big(s * q_bytes)?;
        let bytes = ((s * (q_bytes + s_bytes)) as u64).next_multiple_of(16);
        let buf = Buffer::new(ctx, bytes, MemKind::DeviceLocal, &format!("expert slots {name}"))?;
        let mut init = vec![0u32; TABLE_HEAD + 2 * s + e];
        init[TABLE_HEAD..TABLE_HEAD + s].fill(u32::MAX);
        init[TABLE_HEAD + 2 * s..].fill(u32::MAX);
        let mut table =
            Buffer::new(ctx, (init.len() * 4) as u64, MemKind::DeviceLocal, &format!("expert table {name}"))?;
        one.upload(&mut table, 0, bytemuck::cast_slice(&init))?;
        Ok(Some(Self { n_expert, slots, buf, soff_words, q_words, s_words, table }))
    }
}

/// Push constants of `moe_cache.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeCacheParams {
    pub n_pairs: u32,
    pub n_expert: u32,
    pub slots: u32,
    pub pad: u32,
}

/// Push constants of `moe_fetch.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MoeFetchParams {
    pub q_words: u32,
    pub s_words: u32,
    pub src_soff: u32,
    pub dst_soff: u32,
    pub pieces: u32,
}

impl MoeFetchParams {
    /// The copies of `p`'s experts from `src_soff` (the host tensor's scale plane).
    pub fn of(p: &PagedExperts, src_soff: u32) -> Self {
        let pieces = (p.q_words + p.s_words).div_ceil(FETCH_PIECE).max(1);
        Self { q_words: p.q_words, s_words: p.s_words, src_soff, dst_soff: p.soff_words, pieces }
    }
}

/// Slot assignment and routing rewrite. Bindings: route, table, jobs.
pub fn moe_cache() -> KernelSpec {
    KernelSpec::new("moe_cache", &["common", "moe_cache"], 3, push_size::<MoeCacheParams>())
        .define("MAXE", CACHE_MAX_EXPERTS)
}

/// Expert copies into slots. Bindings: source tensor, slots, jobs.
pub fn moe_fetch() -> KernelSpec {
    KernelSpec::new("moe_fetch", &["common", "moe_fetch"], 3, push_size::<MoeFetchParams>())
        .define("PIECE", FETCH_PIECE)
}

/// Words of the jobs list for up to `slots` copies.
pub fn jobs_words(slots: u32) -> usize {
    1 + 2 * slots as usize
}
