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
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
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

/// `out[j * n_a + i] = dot(w_rows[j], acts[i])` for `n_w` consecutive weight rows of `wrb`
/// bytes and `n_a` activation rows of `arb` bytes. Returns false if there is no fast kernel
/// (nothing is written then).
pub(crate) fn dot_tile(
    ty: GgmlType,
    w_rows: &[u8],
    wrb: usize,
    n_w: usize,
    acts: &[u8],
    arb: usize,
    n_a: usize,
    out: &mut [f32],
) -> bool {
    match level() {
        SimdLevel::None => false,
        #[cfg(target_arch = "x86_64")]
        // SAFETY: level() checked that the CPU has AVX2, FMA and F16C.
        SimdLevel::Avx2 => unsafe { avx2::dot_tile(ty, w_rows, wrb, n_w, acts, arb, n_a, out) },
    }
}
