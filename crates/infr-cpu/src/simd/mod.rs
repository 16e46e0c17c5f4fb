//! Fast dot products of quantized weight rows with quantized activation rows, selected at run
//! time from the CPU's features (never compiled with `target-cpu=native`).
//!
//! Each kernel computes `out[r] = dot(w_row, act_row[r])` for a batch of activation rows so
//! the unpacked weight block is reused across rows. Results equal the reference kernel (which
//! dequantizes both sides to f32) up to float summation order.

#[cfg(target_arch = "x86_64")]
pub(crate) mod acts;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_packed;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;
pub(crate) mod pack;
pub(crate) mod vecf;

use infr_quant::GgmlType;

/// The best kernel set this CPU supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SimdLevel {
    None,
    /// AVX2 + FMA + F16C: 256-bit kernels (packed layouts where one exists).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2 plus AVX-VNNI: the same with `vpdpbusd` on 256 bits.
    #[cfg(target_arch = "x86_64")]
    Avx2Vnni,
    /// AVX2 plus AVX-512 F/BW/VL and VNNI: 512-bit packed kernels.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

/// Every level this CPU can run, lowest first (tests run each).
pub(crate) fn available() -> Vec<SimdLevel> {
    let mut v = vec![SimdLevel::None];
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") && has!("f16c") {
            v.push(SimdLevel::Avx2);
            if has!("avxvnni") {
                v.push(SimdLevel::Avx2Vnni);
            }
            if has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512vnni") {
                v.push(SimdLevel::Avx512Vnni);
            }
        }
    }
    v
}

/// Detect once: the best available level. `INFR_CPU_SIMD=none|avx2|avxvnni` caps it (for
/// comparing kernel sets).
pub(crate) fn level() -> SimdLevel {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let all = available();
        let cap = match std::env::var("INFR_CPU_SIMD").unwrap_or_default().to_ascii_lowercase().as_str() {
            "none" => Some(SimdLevel::None),
            #[cfg(target_arch = "x86_64")]
            "avx2" => Some(SimdLevel::Avx2),
            #[cfg(target_arch = "x86_64")]
            "avxvnni" => Some(SimdLevel::Avx2Vnni),
            _ => None,
        };
        match cap {
            Some(c) if all.contains(&c) => c,
            _ => *all.last().unwrap_or(&SimdLevel::None),
        }
    })
}

/// The 16-row packed kernel of a level: the function and the activation rows per call.
#[cfg(target_arch = "x86_64")]
pub(crate) fn packed_kernel(level: SimdLevel, ty: GgmlType) -> Option<(acts::GroupFn, usize)> {
    match level {
        SimdLevel::None => None,
        SimdLevel::Avx2 => Some((avx2_packed::group_rows as acts::GroupFn, avx2_packed::ROWS_PER_CALL)),
        SimdLevel::Avx2Vnni => Some((avx2_packed::group_rows_vnni as acts::GroupFn, avx2_packed::ROWS_PER_CALL)),
        SimdLevel::Avx512Vnni => Some((avx512::group_rows as acts::GroupFn, avx512::rows_per_call(ty))),
    }
}

/// The kernel set in use, for `infr devices`.
pub(crate) fn describe() -> &'static str {
    match level() {
        SimdLevel::None => "scalar",
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => "avx2 on 16-row packed weights (q4_0 q4_1 q5_0 q8_0 q4_K q5_K q6_K)",
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2Vnni => "avx-vnni on 16-row packed weights (q4_0 q4_1 q5_0 q8_0 q4_K q5_K q6_K)",
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512Vnni => "avx512-vnni on 16-row packed weights (q4_0 q4_1 q5_0 q8_0 q4_K q5_K q6_K)",
    }
}

/// Whether weights of type `ty` are repacked at load for the 16-row kernels on this CPU.
pub(crate) fn packs(ty: GgmlType) -> bool {
    level() != SimdLevel::None && cfg!(target_arch = "x86_64") && pack::shape_of(ty).is_some()
}

/// Whether a fast kernel exists for weights of type `ty` on this CPU.
pub(crate) fn supports(ty: GgmlType) -> bool {
    match level() {
        SimdLevel::None => false,
        #[cfg(target_arch = "x86_64")]
        _ => avx2::supports(ty),
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
        _ => unsafe { avx2::dot_tile(ty, w_rows, wrb, n_w, acts, arb, n_a, out) },
    }
}
