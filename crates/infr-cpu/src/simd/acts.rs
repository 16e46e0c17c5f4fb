//! The activation side of the packed kernels: prepared rows, their block layouts and the
//! unaligned scalar reads every instruction-set version shares.

use infr_quant::GgmlType;

use super::pack::PackedWeight;

/// Q8_0 activation block: f16 scale, 32 i8.
pub(crate) const Q8_0_BYTES: usize = 34;
/// Q8_1 activation block: f16 scale, f16 scaled sum, 32 i8.
pub(crate) const Q8_1_BYTES: usize = 36;
/// Q8_K activation block: f32 scale, 256 i8, 16 i16 sums of 16.
pub(crate) const Q8K_BYTES: usize = 4 + 256 + 32;

/// Activation rows prepared for a packed matmul.
pub(crate) struct ActRows<'a> {
    /// Quantized rows (Q8_0, Q8_1 or Q8_K blocks), `stride` bytes apart.
    pub bytes: &'a [u8],
    pub stride: usize,
    /// Per row, per 32-value block, the integer sum of the activation bytes (Q8_0 rows
    /// against offset weights); `nb` values per row. Empty when unused.
    pub sums: &'a [i32],
}

/// A packed kernel entry point: group `g`, activation rows `i0..i0+n`, output `[n, m]`.
pub(crate) type GroupFn = unsafe fn(&PackedWeight, usize, &ActRows<'_>, usize, usize, *mut f32, usize) -> bool;

/// Whether the weight type needs [`ActRows::sums`].
pub(crate) fn needs_sums(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0)
}

/// Activation block bytes per packed block for a weight type.
pub(crate) fn act_bytes_per_block(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4_1 => Q8_1_BYTES,
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => Q8K_BYTES,
        _ => Q8_0_BYTES,
    }
}

/// Whether `n` rows from `i0` of `a` hold enough bytes (and sums) for group `g` of `pw`.
pub(crate) fn rows_fit(pw: &PackedWeight, g: usize, a: &ActRows<'_>, i0: usize, n: usize) -> bool {
    g < pw.groups
        && n > 0
        && a.stride >= pw.nb * act_bytes_per_block(pw.ty)
        && a.bytes.len() >= (i0 + n) * a.stride
        && (!needs_sums(pw.ty) || a.sums.len() >= (i0 + n) * pw.nb)
}

/// The f16 at `p` (unaligned).
///
/// # Safety
/// `p` must be valid for two bytes.
#[inline(always)]
pub(crate) unsafe fn f16_at(p: *const u8) -> f32 {
    half::f16::from_bits(std::ptr::read_unaligned(p as *const u16)).to_f32()
}

/// The f32 at `p` (unaligned).
///
/// # Safety
/// `p` must be valid for four bytes.
#[inline(always)]
pub(crate) unsafe fn f32_at(p: *const u8) -> f32 {
    std::ptr::read_unaligned(p as *const f32)
}

/// The i16 at `p` (unaligned), widened.
///
/// # Safety
/// `p` must be valid for two bytes.
#[inline(always)]
pub(crate) unsafe fn i16_at(p: *const u8) -> i32 {
    std::ptr::read_unaligned(p as *const i16) as i32
}
