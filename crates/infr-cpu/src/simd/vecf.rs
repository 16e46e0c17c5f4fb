//! f32 vector helpers for attention and activations, with AVX-512 versions chosen at run
//! time (the crate is built for baseline x86-64, so plain loops get SSE2 only).
//!
//! `exp` is Cephes' `expf` polynomial (as ggml's `ggml_v_expf` is a vectorized exp of the
//! same accuracy class, ~1 ulp): results may differ from libm's `expf` in the last bit.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the AVX-512 versions run on this CPU.
#[inline]
fn wide() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::level() == super::SimdLevel::Avx512Vnni
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `Σ a[i] * b[i]`.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512F checked by `wide`; both slices hold `n` values.
        return unsafe { dot512(a.as_ptr(), b.as_ptr(), n) };
    }
    crate::matmul::dot_f32(&a[..n], &b[..n])
}

/// `y[i] += s * x[i]`.
#[inline]
pub(crate) fn axpy(y: &mut [f32], s: f32, x: &[f32]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512F checked by `wide`; both slices hold `n` values.
        return unsafe { axpy512(y.as_mut_ptr(), s, x.as_ptr(), n) };
    }
    for (a, b) in y[..n].iter_mut().zip(&x[..n]) {
        *a += s * b;
    }
}

/// Whether [`dot_f16`] / [`axpy_f16`] run fused kernels here. Elsewhere they convert to a
/// temporary first, and callers on a hot path do better converting into their own scratch.
pub(crate) fn f16_fused() -> bool {
    wide()
}

/// `Σ a[i] * b[i]` over f16 `b`: [`dot`] of `b` converted to f32, in the same order.
#[inline]
pub(crate) fn dot_f16(a: &[f32], b: &[half::f16]) -> f32 {
    let n = a.len().min(b.len());
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512F checked by `wide`; both slices hold `n` values.
        return unsafe { dot512_f16(a.as_ptr(), b.as_ptr() as *const u16, n) };
    }
    let mut bf = vec![0f32; n];
    half::slice::HalfFloatSliceExt::convert_to_f32_slice(&b[..n], &mut bf);
    crate::matmul::dot_f32(&a[..n], &bf)
}

/// `y[i] += s * x[i]` over f16 `x`: [`axpy`] of `x` converted to f32.
#[inline]
pub(crate) fn axpy_f16(y: &mut [f32], s: f32, x: &[half::f16]) {
    let n = y.len().min(x.len());
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512F checked by `wide`; both slices hold `n` values.
        return unsafe { axpy512_f16(y.as_mut_ptr(), s, x.as_ptr() as *const u16, n) };
    }
    for (a, b) in y[..n].iter_mut().zip(&x[..n]) {
        *a += s * b.to_f32();
    }
}

/// Quantize one row of activations to Q8_0 (34-byte blocks) or Q8_1 (36-byte blocks) into
/// `out`, bit-exact with `infr_quant::quantize_into` (llama.cpp's `quantize_row_q8_*_ref`:
/// `d = amax / 127`, `q = roundf(x / d)`); false for other types or a short `out` (the
/// caller then uses the reference quantizer).
pub(crate) fn quantize_q8_row(ty: infr_quant::GgmlType, row: &[f32], out: &mut [u8]) -> bool {
    use infr_quant::GgmlType::{Q8_0, Q8_1};
    let bytes = match ty {
        Q8_0 => 34,
        Q8_1 => 36,
        _ => return false,
    };
    // The kernel's presence first: without it the row is not scanned for nothing.
    if !wide()
        || !row.len().is_multiple_of(32)
        || out.len() < row.len() / 32 * bytes
        || row.iter().any(|v| !v.is_finite())
    {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    for (x, b) in row.chunks_exact(32).zip(out.chunks_exact_mut(bytes)) {
        // SAFETY: AVX-512F checked by `wide`; `x` holds 32 values, `b` `bytes` bytes.
        unsafe { q8_block512(x.as_ptr(), b, ty == Q8_1) };
    }
    true
}

/// One Q8_0 / Q8_1 block: the scale (f16), for Q8_1 the f16 of `sum(q) * d`, 32 int8s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn q8_block512(x: *const f32, b: &mut [u8], with_sum: bool) {
    let (v0, v1) = (_mm512_loadu_ps(x), _mm512_loadu_ps(x.add(16)));
    let sign = _mm512_set1_epi32(0x7fff_ffff);
    let abs = |v: __m512| _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), sign));
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(abs(v0), abs(v1)));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm512_set1_ps(id);
    let half = _mm512_set1_ps(0.5);
    // roundf: truncate, then step away from zero where the dropped fraction is >= 0.5.
    let round = |v: __m512| {
        let y = _mm512_mul_ps(v, idv);
        let t = _mm512_cvttps_epi32(y);
        let f = _mm512_sub_ps(y, _mm512_cvtepi32_ps(t));
        let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(f, half);
        let down = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(f, _mm512_set1_ps(-0.5));
        let t = _mm512_mask_add_epi32(t, up, t, _mm512_set1_epi32(1));
        _mm512_mask_sub_epi32(t, down, t, _mm512_set1_epi32(1))
    };
    let (q0, q1) = (round(v0), round(v1));
    let f16 = |v: f32| infr_quant::float::f32_to_f16(v).to_le_bytes();
    b[..2].copy_from_slice(&f16(d));
    let at = if with_sum {
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        b[2..4].copy_from_slice(&f16(sum as f32 * d));
        4
    } else {
        2
    };
    _mm_storeu_si128(b.as_mut_ptr().add(at) as *mut __m128i, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(b.as_mut_ptr().add(at + 16) as *mut __m128i, _mm512_cvtepi32_epi8(q1));
}

/// `v[i] = exp(v[i] - max)`; returns the sum of the results (in f64, as ggml's soft_max).
pub(crate) fn exp_sub_sum(v: &mut [f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512F checked by `wide`.
        return unsafe { exp_sub_sum512(v, max) };
    }
    let mut sum = 0f64;
    for x in v.iter_mut() {
        *x = (*x - max).exp();
        sum += *x as f64;
    }
    sum
}

/// `g[i] = silu(g[i]) * u[i]` with `silu(x) = x / (1 + exp(-x))`.
pub(crate) fn silu_mul(g: &mut [f32], u: &[f32]) {
    let n = g.len().min(u.len());
    #[cfg(target_arch = "x86_64")]
    if wide() {
        // SAFETY: AVX-512F checked by `wide`; both slices hold `n` values.
        return unsafe { silu_mul512(g.as_mut_ptr(), u.as_ptr(), n) };
    }
    for (x, y) in g[..n].iter_mut().zip(&u[..n]) {
        *x = *x / (1.0 + (-*x).exp()) * y;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot512(a: *const f32, b: *const f32, n: usize) -> f32 {
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= n {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i + 16)), _mm512_loadu_ps(b.add(i + 16)), s1);
        i += 32;
    }
    while i + 16 <= n {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i)), _mm512_loadu_ps(b.add(i)), s0);
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a.add(i)), _mm512_maskz_loadu_ps(m, b.add(i)), s1);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn axpy512(y: *mut f32, s: f32, x: *const f32, n: usize) {
    let sv = _mm512_set1_ps(s);
    let mut i = 0;
    while i + 16 <= n {
        _mm512_storeu_ps(y.add(i), _mm512_fmadd_ps(sv, _mm512_loadu_ps(x.add(i)), _mm512_loadu_ps(y.add(i))));
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        let v = _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, x.add(i)), _mm512_maskz_loadu_ps(m, y.add(i)));
        _mm512_mask_storeu_ps(y.add(i), m, v);
    }
}

/// 16 f16 values from `p` as f32 (`n` < 16: the first `n`, zeros after).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load16_f16(p: *const u16, n: usize) -> __m512 {
    if n >= 16 {
        return _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
    }
    let mut tail = [0u16; 16];
    std::ptr::copy_nonoverlapping(p, tail.as_mut_ptr(), n);
    _mm512_cvtph_ps(_mm256_loadu_si256(tail.as_ptr() as *const __m256i))
}

/// [`dot512`] with `b` in f16 (the same lanes, order and tail).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn dot512_f16(a: *const f32, b: *const u16, n: usize) -> f32 {
    let (mut s0, mut s1) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i + 32 <= n {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i)), load16_f16(b.add(i), 16), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i + 16)), load16_f16(b.add(i + 16), 16), s1);
        i += 32;
    }
    while i + 16 <= n {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a.add(i)), load16_f16(b.add(i), 16), s0);
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a.add(i)), load16_f16(b.add(i), n - i), s1);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
}

/// [`axpy512`] with `x` in f16.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn axpy512_f16(y: *mut f32, s: f32, x: *const u16, n: usize) {
    let sv = _mm512_set1_ps(s);
    let mut i = 0;
    while i + 16 <= n {
        _mm512_storeu_ps(y.add(i), _mm512_fmadd_ps(sv, load16_f16(x.add(i), 16), _mm512_loadu_ps(y.add(i))));
        i += 16;
    }
    if i < n {
        let m: __mmask16 = (1u16 << (n - i)) - 1;
        let v = _mm512_fmadd_ps(sv, load16_f16(x.add(i), n - i), _mm512_maskz_loadu_ps(m, y.add(i)));
        _mm512_mask_storeu_ps(y.add(i), m, v);
    }
}

/// Cephes `expf` on 16 lanes: `e^x = 2^n * e^r`, `r = x - n ln 2` in two parts, a degree-6
/// polynomial for `e^r`, and `scalef` for the power of two (saturating to 0 and +inf).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn exp512(x: __m512) -> __m512 {
    let x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0)), _mm512_set1_ps(88.8));
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
        x,
        _mm512_set1_ps(std::f32::consts::LOG2_E),
    ));
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm512_set1_ps(1.987_569_1e-4);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.398_199_9e-3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.333_452e-3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.166_579_6e-2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.666_666_5e-1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5e-1));
    let y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0)));
    _mm512_scalef_ps(y, n)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_sub_sum512(v: &mut [f32], max: f32) -> f64 {
    let n = v.len();
    let p = v.as_mut_ptr();
    let mv = _mm512_set1_ps(max);
    let mut acc = _mm512_setzero_pd();
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 { 0xFFFF } else { (1u16 << (n - i)) - 1 };
        let e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, p.add(i)), mv));
        let e = _mm512_maskz_mov_ps(m, e);
        _mm512_mask_storeu_ps(p.add(i), m, e);
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e)))));
        i += 16;
    }
    _mm512_reduce_add_pd(acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn silu_mul512(g: *mut f32, u: *const f32, n: usize) {
    let one = _mm512_set1_ps(1.0);
    let mut i = 0;
    while i < n {
        let m: __mmask16 = if n - i >= 16 { 0xFFFF } else { (1u16 << (n - i)) - 1 };
        let x = _mm512_maskz_loadu_ps(m, g.add(i));
        let s = _mm512_div_ps(x, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        _mm512_mask_storeu_ps(g.add(i), m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u.add(i))));
        i += 16;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_libm_closely() {
        let xs: Vec<f32> = (0..4000).map(|i| -90.0 + i as f32 * 0.0445).collect();
        let mut v = xs.clone();
        let sum = exp_sub_sum(&mut v, 0.0);
        let mut want = 0f64;
        for (x, e) in xs.iter().zip(&v) {
            let r = x.exp();
            want += r as f64;
            assert!((e - r).abs() <= 4.0 * f32::EPSILON * r.abs() + 1e-38, "exp({x}) = {e}, libm {r}");
        }
        assert!((sum - want).abs() <= 1e-6 * want);
    }

    #[test]
    fn dot_axpy_silu_match_scalar() {
        for n in [1usize, 15, 16, 17, 64, 100, 256] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - want).abs() < 1e-4);
            let mut y = b.clone();
            axpy(&mut y, 0.5, &a);
            for i in 0..n {
                assert!((y[i] - (b[i] + 0.5 * a[i])).abs() < 1e-6);
            }
            // The f16 forms give exactly what the f32 forms give on the converted values.
            let h: Vec<half::f16> = a.iter().map(|&x| half::f16::from_f32(x)).collect();
            let hf: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
            assert_eq!(dot_f16(&b, &h).to_bits(), dot(&b, &hf).to_bits(), "dot_f16 n={n}");
            let (mut y16, mut y32) = (b.clone(), b.clone());
            axpy_f16(&mut y16, 0.7, &h);
            axpy(&mut y32, 0.7, &hf);
            assert_eq!(y16, y32, "axpy_f16 n={n}");
            // The fast activation quantizer writes the reference quantizer's bytes.
            if n % 32 == 0 {
                let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.731).sin() * 3.0 + (i % 7) as f32 * 0.5).collect();
                for ty in [infr_quant::GgmlType::Q8_0, infr_quant::GgmlType::Q8_1] {
                    let want = infr_quant::quantize(ty, &x).unwrap();
                    let mut got = vec![0u8; want.len()];
                    if quantize_q8_row(ty, &x, &mut got) {
                        assert_eq!(got, want, "{ty:?} n={n}");
                    }
                }
            }
            let mut g = a.clone();
            silu_mul(&mut g, &b);
            for i in 0..n {
                let w = a[i] / (1.0 + (-a[i]).exp()) * b[i];
                assert!((g[i] - w).abs() < 1e-6, "silu {i}");
            }
        }
    }
}
