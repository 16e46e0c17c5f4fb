//! Fast dot products of quantized weight rows with quantized activation rows, selected at run
//! time from the CPU's features (never compiled with `target-cpu=native`).
//!
//! Each kernel computes `out[r] = dot(w_row, act_row[r])` for a batch of activation rows so
//! the unpacked weight block is reused across rows. Results equal the reference kernel (which
//! dequantizes both sides to f32) up to float summation order.

#[cfg(target_arch = "x86_64")]
mod avx2;

use infr_quant::GgmlType;

/// The best kernel set this CPU supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SimdLevel {
    None,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

/// Detect once.
pub(crate) fn level() -> SimdLevel {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::None
    })
}

/// Whether a fast kernel exists for weights of type `ty` on this CPU.
pub(crate) fn supports(ty: GgmlType) -> bool {
    match level() {
        SimdLevel::None => false,
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => avx2::supports(ty),
    }
}

/// `out[r] = dot(w_row, acts[r])` for `out.len()` activation rows of `act_row_bytes` each.
/// Returns false if there is no fast kernel (nothing is written then).
pub(crate) fn dot_rows(ty: GgmlType, w_row: &[u8], acts: &[u8], act_row_bytes: usize, out: &mut [f32]) -> bool {
    match level() {
        SimdLevel::None => false,
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() checked that the CPU has AVX2 and FMA.
        SimdLevel::Avx2 => unsafe { avx2::dot_rows(ty, w_row, acts, act_row_bytes, out) },
    }
}
