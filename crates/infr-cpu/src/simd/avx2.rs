//! AVX2 + FMA kernels (`ggml_vec_dot_*_q8_*` in llama.cpp's `arch/x86/quants.c` compute the
//! same sums; these are written for row batches). Block layouts: see `ggml-common.h`.
//!
//! Safety: every function here is `unsafe` because it uses AVX2/FMA intrinsics; callers must
//! have checked the CPU features. Slices are indexed with checked bounds or with lengths
//! validated by `dot_rows`.

use std::arch::x86_64::*;

use half::f16;
use infr_quant::GgmlType;

const QK_K: usize = 256;
/// Rows of activations processed together against one unpacked weight block.
const NR: usize = 4;

pub(crate) fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
    )
}

#[inline]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

#[inline]
fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load256(b: &[u8], at: usize) -> __m256i {
    debug_assert!(at + 32 <= b.len());
    _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load128(b: &[u8], at: usize) -> __m128i {
    debug_assert!(at + 16 <= b.len());
    _mm_loadu_si128(b.as_ptr().add(at) as *const __m128i)
}

/// Horizontal sum of 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Σ x·y over 32 signed bytes, as 8 i32 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_i8(x: __m256i, y: __m256i) -> __m256i {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// Σ x·y for unsigned x (0..=127 range products safe) and signed y, as 16 i16 partial sums.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_u8_i16(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(x, y)
}

/// Spread 32 bits to 32 bytes: byte j = 0xFF if bit j is set (llama.cpp `bytes_from_bits_32`).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bits_to_bytes(bits: u32) -> __m256i {
    let shuf =
        _mm256_setr_epi64x(0x0000_0000_0000_0000, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303);
    let v = _mm256_shuffle_epi8(_mm256_set1_epi32(bits as i32), shuf);
    let mask = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe_u64 as i64);
    let v = _mm256_or_si256(v, mask);
    _mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1))
}

/// 16 packed nibble bytes → 32 bytes `[low nibbles | high nibbles]`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibbles_32(b: &[u8], at: usize) -> __m256i {
    let t = load128(b, at);
    let lo = _mm_and_si128(t, _mm_set1_epi8(0x0f));
    let hi = _mm_and_si128(_mm_srli_epi16(t, 4), _mm_set1_epi8(0x0f));
    _mm256_set_m128i(hi, lo)
}

/// Dispatch on type; lengths are validated here once.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn dot_rows(ty: GgmlType, w: &[u8], acts: &[u8], arb: usize, out: &mut [f32]) -> bool {
    let n_rows = out.len();
    if !supports(ty) || acts.len() < n_rows * arb {
        return false;
    }
    let info = ty.info();
    let nb = w.len() / info.type_size;
    if nb * info.type_size != w.len() {
        return false;
    }
    let mut r0 = 0;
    while r0 < n_rows {
        let nr = (n_rows - r0).min(NR);
        let a = &acts[r0 * arb..(r0 + nr) * arb];
        let mut res = [0f32; NR];
        match ty {
            GgmlType::Q8_0 => q8_0(w, nb, a, arb, nr, &mut res),
            GgmlType::Q4_0 => q4_0(w, nb, a, arb, nr, &mut res),
            GgmlType::Q4_1 => q4_1(w, nb, a, arb, nr, &mut res),
            GgmlType::Q5_0 => q5_0(w, nb, a, arb, nr, &mut res),
            GgmlType::Q4_K => q4_k(w, nb, a, arb, nr, &mut res),
            GgmlType::Q5_K => q5_k(w, nb, a, arb, nr, &mut res),
            GgmlType::Q6_K => q6_k(w, nb, a, arb, nr, &mut res),
            _ => return false,
        }
        out[r0..r0 + nr].copy_from_slice(&res[..nr]);
        r0 += nr;
    }
    true
}

// ---- legacy 32-element blocks against Q8_0 (34 bytes: f16 d, 32 i8) / Q8_1 (36 bytes: f16 d, f16 s, 32 i8)

#[target_feature(enable = "avx2,fma")]
unsafe fn q8_0(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    let mut acc = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        let wb = b * 34;
        let x = load256(w, wb + 2);
        let dx = f16_at(w, wb);
        for r in 0..nr {
            let ab = r * arb + b * 34;
            let p = _mm256_cvtepi32_ps(dot_i8(x, load256(a, ab + 2)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16_at(a, ab)), p, acc[r]);
        }
    }
    for r in 0..nr {
        res[r] = hsum_ps(acc[r]);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn q4_0(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    let mut acc = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        let wb = b * 18;
        let x = _mm256_sub_epi8(nibbles_32(w, wb + 2), _mm256_set1_epi8(8));
        let dx = f16_at(w, wb);
        for r in 0..nr {
            let ab = r * arb + b * 34;
            let p = _mm256_cvtepi32_ps(dot_i8(x, load256(a, ab + 2)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16_at(a, ab)), p, acc[r]);
        }
    }
    for r in 0..nr {
        res[r] = hsum_ps(acc[r]);
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn q4_1(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    let mut acc = [_mm256_setzero_ps(); NR];
    let mut accm = [0f32; NR];
    let ones = _mm256_set1_epi16(1);
    for b in 0..nb {
        let wb = b * 20;
        let x = nibbles_32(w, wb + 4);
        let (dx, mx) = (f16_at(w, wb), f16_at(w, wb + 2));
        for r in 0..nr {
            let ab = r * arb + b * 36;
            let p = _mm256_madd_epi16(dot_u8_i16(x, load256(a, ab + 4)), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16_at(a, ab)), _mm256_cvtepi32_ps(p), acc[r]);
            accm[r] += mx * f16_at(a, ab + 2);
        }
    }
    for r in 0..nr {
        res[r] = hsum_ps(acc[r]) + accm[r];
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn q5_0(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    let mut acc = [_mm256_setzero_ps(); NR];
    for b in 0..nb {
        let wb = b * 22;
        let qh = u32::from_le_bytes([w[wb + 2], w[wb + 3], w[wb + 4], w[wb + 5]]);
        // (nibble | hbit << 4) - 16  ==  nibble - (hbit ? 0 : 16)
        let hb = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8(-16));
        let x = _mm256_or_si256(nibbles_32(w, wb + 6), hb);
        let dx = f16_at(w, wb);
        for r in 0..nr {
            let ab = r * arb + b * 34;
            let p = _mm256_cvtepi32_ps(dot_i8(x, load256(a, ab + 2)));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16_at(a, ab)), p, acc[r]);
        }
    }
    for r in 0..nr {
        res[r] = hsum_ps(acc[r]);
    }
}

// ---- k-quants against Q8_K (292 bytes: f32 d, 256 i8 qs, 16 i16 bsums)

const Q8K_QS: usize = 4;
const Q8K_BSUMS: usize = 4 + QK_K;
const Q8K_SIZE: usize = 4 + QK_K + 32;

#[inline]
fn bsum(a: &[u8], ab: usize, i: usize) -> i32 {
    let at = ab + Q8K_BSUMS + 2 * i;
    i16::from_le_bytes([a[at], a[at + 1]]) as i32
}

/// The 6-bit scales and mins of Q4_K/Q5_K (`get_scale_min_k4`).
#[inline]
fn scale_min_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..8 {
        if j < 4 {
            sc[j] = s[j] & 63;
            m[j] = s[j + 4] & 63;
        } else {
            sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
            m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
    }
    (sc, m)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn q4_k(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    const BS: usize = 144;
    let mut acc = [0f32; NR];
    let mask = _mm256_set1_epi8(0x0f);
    for b in 0..nb {
        let wb = b * BS;
        let (d, dmin) = (f16_at(w, wb), f16_at(w, wb + 2));
        let (sc, m) = scale_min_k4(&w[wb + 4..wb + 16]);
        let mut lo = [_mm256_setzero_si256(); 4];
        let mut hi = [_mm256_setzero_si256(); 4];
        for j in 0..4 {
            let q = load256(w, wb + 16 + 32 * j);
            lo[j] = _mm256_and_si256(q, mask);
            hi[j] = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
        }
        for r in 0..nr {
            let ab = r * arb + b * Q8K_SIZE;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let y0 = load256(a, ab + Q8K_QS + 64 * j);
                let y1 = load256(a, ab + Q8K_QS + 64 * j + 32);
                let p0 = _mm256_madd_epi16(dot_u8_i16(lo[j], y0), _mm256_set1_epi16(sc[2 * j] as i16));
                let p1 = _mm256_madd_epi16(dot_u8_i16(hi[j], y1), _mm256_set1_epi16(sc[2 * j + 1] as i16));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            }
            let mut summ = 0i32;
            for s in 0..8 {
                summ += m[s] as i32 * (bsum(a, ab, 2 * s) + bsum(a, ab, 2 * s + 1));
            }
            let dy = f32_at(a, ab);
            acc[r] += d * dy * hsum_i32(sumi) as f32 - dmin * dy * summ as f32;
        }
    }
    res[..nr].copy_from_slice(&acc[..nr]);
}

#[target_feature(enable = "avx2,fma")]
unsafe fn q5_k(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    const BS: usize = 176;
    let mut acc = [0f32; NR];
    let mask = _mm256_set1_epi8(0x0f);
    let sixteen = _mm256_set1_epi8(16);
    for b in 0..nb {
        let wb = b * BS;
        let (d, dmin) = (f16_at(w, wb), f16_at(w, wb + 2));
        let (sc, m) = scale_min_k4(&w[wb + 4..wb + 16]);
        let qh = load256(w, wb + 16);
        let mut lo = [_mm256_setzero_si256(); 4];
        let mut hi = [_mm256_setzero_si256(); 4];
        for j in 0..4 {
            let q = load256(w, wb + 48 + 32 * j);
            // High bits: bit 2j of qh[l] for the low half, bit 2j+1 for the high half.
            let h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128((2 * j) as i32)), _mm256_set1_epi8(1));
            let h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128((2 * j + 1) as i32)), _mm256_set1_epi8(1));
            let h0 = _mm256_and_si256(_mm256_cmpeq_epi8(h0, _mm256_set1_epi8(1)), sixteen);
            let h1 = _mm256_and_si256(_mm256_cmpeq_epi8(h1, _mm256_set1_epi8(1)), sixteen);
            lo[j] = _mm256_or_si256(_mm256_and_si256(q, mask), h0);
            hi[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), h1);
        }
        for r in 0..nr {
            let ab = r * arb + b * Q8K_SIZE;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let y0 = load256(a, ab + Q8K_QS + 64 * j);
                let y1 = load256(a, ab + Q8K_QS + 64 * j + 32);
                let p0 = _mm256_madd_epi16(dot_u8_i16(lo[j], y0), _mm256_set1_epi16(sc[2 * j] as i16));
                let p1 = _mm256_madd_epi16(dot_u8_i16(hi[j], y1), _mm256_set1_epi16(sc[2 * j + 1] as i16));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            }
            let mut summ = 0i32;
            for s in 0..8 {
                summ += m[s] as i32 * (bsum(a, ab, 2 * s) + bsum(a, ab, 2 * s + 1));
            }
            let dy = f32_at(a, ab);
            acc[r] += d * dy * hsum_i32(sumi) as f32 - dmin * dy * summ as f32;
        }
    }
    res[..nr].copy_from_slice(&acc[..nr]);
}

#[target_feature(enable = "avx2,fma")]
unsafe fn q6_k(w: &[u8], nb: usize, a: &[u8], arb: usize, nr: usize, res: &mut [f32; NR]) {
    const BS: usize = 210;
    let mut acc = [0f32; NR];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(3);
    for b in 0..nb {
        let wb = b * BS;
        let (ql, qh, scales) = (wb, wb + 128, wb + 192);
        let d = f16_at(w, wb + 208);
        // q[g] covers elements 32g..32g+32 as unsigned 0..63.
        let mut q = [_mm256_setzero_si256(); 8];
        for n in 0..2 {
            let l0 = load256(w, ql + 64 * n);
            let l1 = load256(w, ql + 64 * n + 32);
            let h = load256(w, qh + 32 * n);
            let hb = |s: i32| _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(s)), m2), 4);
            q[4 * n] = _mm256_or_si256(_mm256_and_si256(l0, m4), hb(0));
            q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), hb(2));
            q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hb(4));
            q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hb(6));
        }
        let sc: [i16; 16] = std::array::from_fn(|i| w[scales + i] as i8 as i16);
        for r in 0..nr {
            let ab = r * arb + b * Q8K_SIZE;
            let mut sumi = _mm256_setzero_si256();
            for g in 0..8 {
                let y = load256(a, ab + Q8K_QS + 32 * g);
                let p = dot_u8_i16(q[g], y);
                // Scale index of elements 32g.. : 16-element groups 2g and 2g+1.
                let s = _mm256_setr_epi16(
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                    sc[2 * g + 1],
                );
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
            let mut sum32 = 0i32;
            for i in 0..16 {
                sum32 += sc[i] as i32 * bsum(a, ab, i);
            }
            let dy = f32_at(a, ab);
            acc[r] += d * dy * (hsum_i32(sumi) - 32 * sum32) as f32;
        }
    }
    res[..nr].copy_from_slice(&acc[..nr]);
}
