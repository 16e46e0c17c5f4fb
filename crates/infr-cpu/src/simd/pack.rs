//! Weights repacked at load for the 512-bit kernels: sixteen rows interleaved so one vector
//! lane holds one weight row, the layout llama.cpp's CPU "repack" buffers use for the same
//! reason (`block_q4_0x8` and friends in `ggml-cpu/repack.cpp`): a dot product then needs no
//! horizontal sums, each activation byte group is broadcast once for sixteen rows, and the
//! per-row scales load as one vector.
//!
//! Every layout is lossless and keeps the native bit width (same bytes per row, so decode
//! reads no more memory than the GGUF blocks). Per group of [`LANES`] rows the data is
//! `nb` blocks of *quant bytes* (a multiple of 64) followed by `nb` blocks of *aux bytes*
//! (f16 scales and the like); groups start on 64-byte boundaries. Rows past the end of the
//! tensor are zero (scale 0), and their results are never stored.
//!
//! Layouts, per group and block (`r` = row in group, each "chunk" is 16 rows x 4 bytes):
//! - Q4_0 / Q4_1 (32 values): quants `c in 0..4`: `qs[r][4c..4c+4]` (low nibbles = values
//!   `4c..`, high = `16+4c..`); aux `d[16]` f16 (Q4_1: then `m[16]` f16).
//! - Q5_0: quants: the high bits of row r as one u32 with value `4c+e`'s bit moved to bit
//!   `8e+c` (so `(h >> c) & 0x01010101` gives chunk c's four high bits), then the Q4 nibbles;
//!   aux `d[16]`.
//! - Q8_0: quants `c in 0..8`: `qs[r][4c..4c+4] ^ 0x80` (stored unsigned: `q + 128`); aux `d[16]`.
//! - Q4_K (256 values): quants `j in 0..4, c in 0..8`: `qs[r][32j+4c..]` (low nibbles =
//!   sub-block 2j, high = 2j+1); aux `d[16]`, `dmin[16]` f16, `scale[8][16]`, `min[8][16]` u8.
//! - Q5_K: as Q4_K, then the high bits: `c in 0..8`: `qh[r][4c..4c+4]` (bit s of byte l is value
//!   `32s + l`'s fifth bit).
//! - Q6_K: quants `n in 0..2, c in 0..8`: `ql[r][64n+4c..]`, `ql[r][64n+32+4c..]`,
//!   `qh[r][32n+4c..]`; aux `d[16]` f16, `scale[16][16]` i8.

use infr_quant::GgmlType;

/// Rows per interleaved group (one 512-bit vector of i32 or f32).
pub(crate) const LANES: usize = 16;

/// Zeroed bytes aligned to 2 MiB and, on Linux, advised as transparent huge pages: a decode
/// step streams every weight once, and huge pages spare the TLB misses and let the hardware
/// prefetcher run across what would be 4 KiB page boundaries.
pub(crate) struct HugeBytes {
    ptr: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: plain owned bytes, like a `Vec<u8>`.
unsafe impl Send for HugeBytes {}
unsafe impl Sync for HugeBytes {}

impl HugeBytes {
    const HUGE: usize = 2 << 20;

    /// `len` zero bytes (`len` > 0); only buffers of several huge pages are rounded up to
    /// them (small ones would waste most of a page).
    fn zeroed(len: usize) -> Self {
        let align = if len >= 4 * Self::HUGE { Self::HUGE } else { 64 };
        let layout = std::alloc::Layout::from_size_align(len.next_multiple_of(align), align)
            .expect("packed weight size fits a layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = std::ptr::NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        // SAFETY (madvise): advisory call on memory we own; failure only means small pages.
        #[cfg(target_os = "linux")]
        if align == Self::HUGE {
            unsafe { libc::madvise(raw as *mut libc::c_void, layout.size(), libc::MADV_HUGEPAGE) };
        }
        // SAFETY: `raw` is valid for `layout.size()` bytes.
        unsafe { std::ptr::write_bytes(raw, 0, layout.size()) };
        Self { ptr, layout }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: allocated and initialised for `layout.size()` bytes in `zeroed`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for HugeBytes {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// Byte sizes of one block of a packed layout (for a whole group of 16 rows).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PackedShape {
    /// Values per block (32 for legacy types, 256 for k-quants).
    pub block: usize,
    /// Quant bytes per block per group (multiple of 64).
    pub quant_bytes: usize,
    /// Aux (scale) bytes per block per group.
    pub aux_bytes: usize,
}

/// The packed shape of a type, if it has a packed layout.
pub(crate) fn shape_of(ty: GgmlType) -> Option<PackedShape> {
    let (block, quant_bytes, aux_bytes) = match ty {
        GgmlType::Q4_0 => (32, 256, 32),
        GgmlType::Q4_1 => (32, 256, 64),
        GgmlType::Q5_0 => (32, 64 + 256, 32),
        GgmlType::Q8_0 => (32, 512, 32),
        GgmlType::Q4_K => (256, 2048, 64 + 256),
        GgmlType::Q5_K => (256, 2048 + 512, 64 + 256),
        GgmlType::Q6_K => (256, 3072, 32 + 256),
        _ => return None,
    };
    Some(PackedShape { block, quant_bytes, aux_bytes })
}

/// A weight matrix in the packed layout.
pub(crate) struct PackedWeight {
    /// Source type (selects the kernel).
    pub ty: GgmlType,
    /// Block sizes.
    pub shape: PackedShape,
    /// Blocks per row.
    pub nb: usize,
    /// Row count of the original tensor (groups beyond it are zero-padded).
    pub rows: usize,
    /// Number of 16-row groups.
    pub groups: usize,
    /// Bytes per group (a multiple of 64).
    pub group_bytes: usize,
    data: HugeBytes,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedWeight({}, {} groups x {} bytes)", self.ty, self.groups, self.group_bytes)
    }
}

impl PackedWeight {
    /// Bytes of group `g`: `nb` quant blocks, then `nb` aux blocks.
    #[inline]
    pub(crate) fn group(&self, g: usize) -> &[u8] {
        &self.data.as_slice()[g * self.group_bytes..(g + 1) * self.group_bytes]
    }
}

fn f16_bytes(b: &[u8], at: usize) -> [u8; 2] {
    [b[at], b[at + 1]]
}

/// Repack `rows` rows of `row_bytes` bytes of type `ty`; `None` if the type has no layout
/// or the bytes do not match the shape.
pub(crate) fn pack(ty: GgmlType, bytes: &[u8], rows: usize, row_bytes: usize) -> Option<PackedWeight> {
    use rayon::prelude::*;
    let shape = shape_of(ty)?;
    let info = ty.info();
    if info.block_size != shape.block || !row_bytes.is_multiple_of(info.type_size) || bytes.len() != rows * row_bytes {
        return None;
    }
    let nb = row_bytes / info.type_size;
    let groups = rows.div_ceil(LANES);
    let group_bytes = (nb * (shape.quant_bytes + shape.aux_bytes)).div_ceil(64) * 64;
    let mut data = HugeBytes::zeroed(groups * group_bytes);
    data.as_mut_slice()[..groups * group_bytes].par_chunks_mut(group_bytes).enumerate().for_each(|(g, out)| {
        let (quants, aux) = out.split_at_mut(nb * shape.quant_bytes);
        for r in 0..LANES.min(rows - g * LANES) {
            let row = &bytes[(g * LANES + r) * row_bytes..(g * LANES + r + 1) * row_bytes];
            for b in 0..nb {
                let src = &row[b * info.type_size..(b + 1) * info.type_size];
                let q = &mut quants[b * shape.quant_bytes..(b + 1) * shape.quant_bytes];
                let a = &mut aux[b * shape.aux_bytes..(b + 1) * shape.aux_bytes];
                pack_block(ty, src, r, q, a);
            }
        }
    });
    Some(PackedWeight { ty, shape, nb, rows, groups, group_bytes, data })
}

/// Copy 4 bytes of `src` at `from` into chunk `chunk` (64 bytes) lane `r` of `q`.
#[inline]
fn put4(q: &mut [u8], chunk: usize, r: usize, src: &[u8], from: usize, xor: u8) {
    for e in 0..4 {
        q[chunk * 64 + r * 4 + e] = src[from + e] ^ xor;
    }
}

/// Scatter one source block of row `r` into the group's quant and aux blocks.
fn pack_block(ty: GgmlType, src: &[u8], r: usize, q: &mut [u8], a: &mut [u8]) {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let qs = if ty == GgmlType::Q4_0 { 2 } else { 4 };
            for c in 0..4 {
                put4(q, c, r, src, qs + 4 * c, 0);
            }
            a[2 * r..2 * r + 2].copy_from_slice(&f16_bytes(src, 0));
            if ty == GgmlType::Q4_1 {
                a[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&f16_bytes(src, 2));
            }
        }
        GgmlType::Q5_0 => {
            let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
            let mut h = 0u32;
            for c in 0..8 {
                for e in 0..4 {
                    if qh >> (4 * c + e) & 1 == 1 {
                        h |= 1 << (8 * e + c);
                    }
                }
            }
            q[4 * r..4 * r + 4].copy_from_slice(&h.to_le_bytes());
            for c in 0..4 {
                put4(&mut q[64..], c, r, src, 6 + 4 * c, 0);
            }
            a[2 * r..2 * r + 2].copy_from_slice(&f16_bytes(src, 0));
        }
        GgmlType::Q8_0 => {
            for c in 0..8 {
                put4(q, c, r, src, 2 + 4 * c, 0x80);
            }
            a[2 * r..2 * r + 2].copy_from_slice(&f16_bytes(src, 0));
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let qs = if ty == GgmlType::Q4_K { 16 } else { 48 };
            for j in 0..4 {
                for c in 0..8 {
                    put4(q, j * 8 + c, r, src, qs + 32 * j + 4 * c, 0);
                }
            }
            if ty == GgmlType::Q5_K {
                for c in 0..8 {
                    put4(&mut q[2048..], c, r, src, 16 + 4 * c, 0);
                }
            }
            a[2 * r..2 * r + 2].copy_from_slice(&f16_bytes(src, 0));
            a[32 + 2 * r..32 + 2 * r + 2].copy_from_slice(&f16_bytes(src, 2));
            let s: &[u8; 12] = src[4..16].try_into().expect("12 scale bytes");
            for sb in 0..8 {
                let (sc, mn) = infr_quant::kquants::get_scale_min_k4(sb, s);
                a[64 + sb * 16 + r] = sc;
                a[64 + 128 + sb * 16 + r] = mn;
            }
        }
        GgmlType::Q6_K => {
            for n in 0..2 {
                for c in 0..8 {
                    let base = (n * 8 + c) * 3;
                    put4(q, base, r, src, 64 * n + 4 * c, 0);
                    put4(q, base + 1, r, src, 64 * n + 32 + 4 * c, 0);
                    put4(q, base + 2, r, src, 128 + 32 * n + 4 * c, 0);
                }
            }
            a[2 * r..2 * r + 2].copy_from_slice(&f16_bytes(src, 208));
            for gi in 0..16 {
                a[32 + gi * 16 + r] = src[192 + gi];
            }
        }
        _ => unreachable!("shape_of admitted {ty}"),
    }
}
