//! AVX2 + FMA kernels (`ggml_vec_dot_*_q8_*` in llama.cpp's `arch/x86/quants.c` compute the
//! same sums; these are written for row batches). Block layouts: see `ggml-common.h`.
//!
//! Safety: every function here is `unsafe` because it uses AVX2/FMA intrinsics; callers must
//! have checked the CPU features. Slices are indexed with checked bounds or with lengths
//! validated by `dot_rows`.

use std::arch::x86_64::*;

use infr_quant::kquants::get_scale_min_k4;
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
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
    debug_assert!(at + 2 <= b.len());
    let h = std::ptr::read_unaligned(b.as_ptr().add(at) as *const u16);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

#[inline]
unsafe fn f32_at(b: &[u8], at: usize) -> f32 {
    debug_assert!(at + 4 <= b.len());
    std::ptr::read_unaligned(b.as_ptr().add(at) as *const f32)
}

#[inline]
unsafe fn u32_at(b: &[u8], at: usize) -> u32 {
    debug_assert!(at + 4 <= b.len());
    std::ptr::read_unaligned(b.as_ptr().add(at) as *const u32)
}

#[inline]
unsafe fn byte_at(b: &[u8], at: usize) -> u8 {
    debug_assert!(at < b.len());
    *b.get_unchecked(at)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load256(b: &[u8], at: usize) -> __m256i {
    debug_assert!(at + 32 <= b.len());
    _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load128(b: &[u8], at: usize) -> __m128i {
    debug_assert!(at + 16 <= b.len());
    _mm_loadu_si128(b.as_ptr().add(at) as *const __m128i)
}

/// Horizontal sum of 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

/// Spread 32 bits to 32 bytes: byte j = 0xFF if bit j is set (llama.cpp `bytes_from_bits_32`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
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
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles_32(b: &[u8], at: usize) -> __m256i {
    let t = load128(b, at);
    let lo = _mm_and_si128(t, _mm_set1_epi8(0x0f));
    let hi = _mm_and_si128(_mm_srli_epi16(t, 4), _mm_set1_epi8(0x0f));
    _mm256_set_m128i(hi, lo)
}

/// One tile of work: `WR` weight rows (stride `wrb` bytes, `nb` blocks each) against `R`
/// activation rows (stride `arb`), results to `out[wi * ostride + r]`.
struct Tile<'a> {
    w: &'a [u8],
    wrb: usize,
    nb: usize,
    a: &'a [u8],
    arb: usize,
    out: &'a mut [f32],
    ostride: usize,
}

/// Activation block bytes per weight block: Q8_0 34, Q8_1 36, Q8_K 292.
fn act_block_bytes(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4_1 => 36,
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => Q8K_SIZE,
        _ => 34,
    }
}

/// `out[j * n_a + i] = dot(w_row[j], act_row[i])` for `n_w` weight rows of `wrb` bytes and
/// `n_a` activation rows of `arb` bytes. Lengths are validated here once; returns false when
/// the type has no kernel.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_tile(
    ty: GgmlType,
    w: &[u8],
    wrb: usize,
    n_w: usize,
    acts: &[u8],
    arb: usize,
    n_a: usize,
    out: &mut [f32],
) -> bool {
    if !supports(ty) || n_w == 0 || n_a == 0 {
        return false;
    }
    let info = ty.info();
    let nb = wrb / info.type_size;
    if nb * info.type_size != wrb || w.len() < n_w * wrb || acts.len() < n_a * arb || out.len() < n_w * n_a {
        return false;
    }
    if arb < nb * act_block_bytes(ty) {
        return false;
    }
    macro_rules! run {
        ($k:ident, $wr:literal, $t:expr, $r:expr) => {
            match $r {
                1 => $k::<$wr, 1>($t),
                2 => $k::<$wr, 2>($t),
                3 => $k::<$wr, 3>($t),
                _ => $k::<$wr, 4>($t),
            }
        };
    }
    macro_rules! tile {
        ($k:ident) => {{
            // Decode (one activation row) wants several weight rows for independent chains;
            // prefill reuses each unpacked weight block across four activation rows.
            let wr_max = if n_a == 1 { 4 } else { 2 };
            let mut j = 0;
            while j < n_w {
                let wr = (n_w - j).min(wr_max);
                let mut i = 0;
                while i < n_a {
                    let r = (n_a - i).min(NR);
                    let t = Tile {
                        w: &w[j * wrb..(j + wr) * wrb],
                        wrb,
                        nb,
                        a: &acts[i * arb..(i + r) * arb],
                        arb,
                        out: &mut out[j * n_a + i..],
                        ostride: n_a,
                    };
                    match wr {
                        4 => run!($k, 4, t, r),
                        3 => run!($k, 3, t, r),
                        2 => run!($k, 2, t, r),
                        _ => run!($k, 1, t, r),
                    }
                    i += r;
                }
                j += wr;
            }
        }};
    }
    match ty {
        GgmlType::Q8_0 => tile!(q8_0),
        GgmlType::Q4_0 => tile!(q4_0),
        GgmlType::Q4_1 => tile!(q4_1),
        GgmlType::Q5_0 => tile!(q5_0),
        GgmlType::Q4_K => tile!(q4_k),
        GgmlType::Q5_K => tile!(q5_k),
        GgmlType::Q6_K => tile!(q6_k),
        _ => return false,
    }
    true
}

// ---- legacy 32-element blocks against Q8_0 (34 bytes: f16 d, 32 i8) / Q8_1 (36 bytes: f16 d, f16 s, 32 i8)

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Shared loop of the symmetric 32-element formats (Q8_0, Q4_0, Q5_0): `unpack(w, offset)`
/// gives the block's 32 signed values, `bs` is the block size in bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn legacy_sym<const WR: usize, const R: usize>(
    t: Tile<'_>,
    bs: usize,
    unpack: impl Fn(&[u8], usize) -> __m256i,
) {
    let mut acc = [[_mm256_setzero_ps(); R]; WR];
    let ones = _mm256_set1_epi16(1);
    for b in 0..t.nb {
        let mut y = [_mm256_setzero_si256(); R];
        let mut dy = [0f32; R];
        for r in 0..R {
            let ab = r * t.arb + b * 34;
            y[r] = load256(t.a, ab + 2);
            dy[r] = f16_at(t.a, ab);
        }
        for wi in 0..WR {
            let wb = wi * t.wrb + b * bs;
            let x = unpack(t.w, wb);
            let dx = f16_at(t.w, wb);
            let ax = _mm256_sign_epi8(x, x);
            for r in 0..R {
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y[r], x)), ones);
                acc[wi][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[r]), _mm256_cvtepi32_ps(p), acc[wi][r]);
            }
        }
    }
    for wi in 0..WR {
        for r in 0..R {
            t.out[wi * t.ostride + r] = hsum_ps(acc[wi][r]);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0<const WR: usize, const R: usize>(t: Tile<'_>) {
    legacy_sym::<WR, R>(t, 34, |w, wb| unsafe { load256(w, wb + 2) })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_0<const WR: usize, const R: usize>(t: Tile<'_>) {
    legacy_sym::<WR, R>(t, 18, |w, wb| unsafe { _mm256_sub_epi8(nibbles_32(w, wb + 2), _mm256_set1_epi8(8)) })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_0<const WR: usize, const R: usize>(t: Tile<'_>) {
    legacy_sym::<WR, R>(t, 22, |w, wb| unsafe {
        // (nibble | hbit << 4) - 16  ==  nibble | (hbit ? 0 : 0xF0)
        let hb = _mm256_andnot_si256(bits_to_bytes(u32_at(w, wb + 2)), _mm256_set1_epi8(-16));
        _mm256_or_si256(nibbles_32(w, wb + 6), hb)
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_1<const WR: usize, const R: usize>(t: Tile<'_>) {
    let mut acc = [[_mm256_setzero_ps(); R]; WR];
    let mut accm = [[0f32; R]; WR];
    let ones = _mm256_set1_epi16(1);
    for b in 0..t.nb {
        let mut y = [_mm256_setzero_si256(); R];
        let mut dy = [0f32; R];
        let mut sy = [0f32; R];
        for r in 0..R {
            let ab = r * t.arb + b * 36;
            y[r] = load256(t.a, ab + 4);
            dy[r] = f16_at(t.a, ab);
            sy[r] = f16_at(t.a, ab + 2);
        }
        for wi in 0..WR {
            let wb = wi * t.wrb + b * 20;
            let x = nibbles_32(t.w, wb + 4);
            let (dx, mx) = (f16_at(t.w, wb), f16_at(t.w, wb + 2));
            for r in 0..R {
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, y[r]), ones);
                acc[wi][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dy[r]), _mm256_cvtepi32_ps(p), acc[wi][r]);
                accm[wi][r] += mx * sy[r];
            }
        }
    }
    for wi in 0..WR {
        for r in 0..R {
            t.out[wi * t.ostride + r] = hsum_ps(acc[wi][r]) + accm[wi][r];
        }
    }
}

// ---- k-quants against Q8_K (292 bytes: f32 d, 256 i8 qs, 16 i16 bsums)

const Q8K_QS: usize = 4;
const Q8K_BSUMS: usize = 4 + QK_K;
const Q8K_SIZE: usize = 4 + QK_K + 32;

#[inline]
unsafe fn bsum(a: &[u8], ab: usize, i: usize) -> i32 {
    let at = ab + Q8K_BSUMS + 2 * i;
    debug_assert!(at + 2 <= a.len());
    std::ptr::read_unaligned(a.as_ptr().add(at) as *const i16) as i32
}

/// Shared loop of Q4_K and Q5_K: `unpack(w, block offset)` gives the four 64-element chunks
/// as (low half, high half) unsigned values; scales/mins sit at offset 4 of the block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn k4_like<const WR: usize, const R: usize>(
    t: Tile<'_>,
    bs: usize,
    unpack: impl Fn(&[u8], usize) -> ([__m256i; 4], [__m256i; 4]),
) {
    let mut acc = [[0f32; R]; WR];
    for b in 0..t.nb {
        for wi in 0..WR {
            let wb = wi * t.wrb + b * bs;
            let (d, dmin) = (f16_at(t.w, wb), f16_at(t.w, wb + 2));
            let packed_scales = &*(t.w.as_ptr().add(wb + 4) as *const [u8; 12]);
            let (sc, m): ([u8; 8], [u8; 8]) = (
                std::array::from_fn(|j| get_scale_min_k4(j, packed_scales).0),
                std::array::from_fn(|j| get_scale_min_k4(j, packed_scales).1),
            );
            let (lo, hi) = unpack(t.w, wb);
            for r in 0..R {
                let ab = r * t.arb + b * Q8K_SIZE;
                let mut sumi = _mm256_setzero_si256();
                for j in 0..4 {
                    let y0 = load256(t.a, ab + Q8K_QS + 64 * j);
                    let y1 = load256(t.a, ab + Q8K_QS + 64 * j + 32);
                    let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[j], y0), _mm256_set1_epi16(sc[2 * j] as i16));
                    let p1 =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(hi[j], y1), _mm256_set1_epi16(sc[2 * j + 1] as i16));
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
                }
                let mut summ = 0i32;
                for s in 0..8 {
                    summ += m[s] as i32 * (bsum(t.a, ab, 2 * s) + bsum(t.a, ab, 2 * s + 1));
                }
                let dy = f32_at(t.a, ab);
                acc[wi][r] += d * dy * hsum_i32(sumi) as f32 - dmin * dy * summ as f32;
            }
        }
    }
    for wi in 0..WR {
        for r in 0..R {
            t.out[wi * t.ostride + r] = acc[wi][r];
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4_k<const WR: usize, const R: usize>(t: Tile<'_>) {
    k4_like::<WR, R>(t, 144, |w, wb| unsafe {
        let mask = _mm256_set1_epi8(0x0f);
        let mut lo = [_mm256_setzero_si256(); 4];
        let mut hi = [_mm256_setzero_si256(); 4];
        for j in 0..4 {
            let q = load256(w, wb + 16 + 32 * j);
            lo[j] = _mm256_and_si256(q, mask);
            hi[j] = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
        }
        (lo, hi)
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q5_k<const WR: usize, const R: usize>(t: Tile<'_>) {
    k4_like::<WR, R>(t, 176, |w, wb| unsafe {
        let mask = _mm256_set1_epi8(0x0f);
        let one = _mm256_set1_epi8(1);
        let sixteen = _mm256_set1_epi8(16);
        let qh = load256(w, wb + 16);
        let mut lo = [_mm256_setzero_si256(); 4];
        let mut hi = [_mm256_setzero_si256(); 4];
        for j in 0..4 {
            let q = load256(w, wb + 48 + 32 * j);
            // High bits: bit 2j of qh[l] for the low half, bit 2j+1 for the high half.
            let h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128((2 * j) as i32)), one);
            let h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128((2 * j + 1) as i32)), one);
            let h0 = _mm256_and_si256(_mm256_cmpeq_epi8(h0, one), sixteen);
            let h1 = _mm256_and_si256(_mm256_cmpeq_epi8(h1, one), sixteen);
            lo[j] = _mm256_or_si256(_mm256_and_si256(q, mask), h0);
            hi[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), h1);
        }
        (lo, hi)
    })
}

/// Bits `s, s+1` of each byte of `h`, moved to bits 4..5 (Q6_K high bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_high(h: __m256i, s: i32, m2: __m256i) -> __m256i {
    _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(s)), m2), 4)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_k<const WR: usize, const R: usize>(t: Tile<'_>) {
    const BS: usize = 210;
    let mut acc = [[0f32; R]; WR];
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(3);
    for b in 0..t.nb {
        for wi in 0..WR {
            let wb = wi * t.wrb + b * BS;
            let (ql, qh, scales) = (wb, wb + 128, wb + 192);
            let d = f16_at(t.w, wb + 208);
            // q[g] covers elements 32g..32g+32 as unsigned 0..63.
            let mut q = [_mm256_setzero_si256(); 8];
            for n in 0..2 {
                let l0 = load256(t.w, ql + 64 * n);
                let l1 = load256(t.w, ql + 64 * n + 32);
                let h = load256(t.w, qh + 32 * n);
                q[4 * n] = _mm256_or_si256(_mm256_and_si256(l0, m4), q6_high(h, 0, m2));
                q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), q6_high(h, 2, m2));
                q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), q6_high(h, 4, m2));
                q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), q6_high(h, 6, m2));
            }
            // Each 32-element group has two 16-element scales: lanes 0..7 and 8..15 of the
            // maddubs result.
            let mut sv = [_mm256_setzero_si256(); 8];
            let mut sc = [0i32; 16];
            for g in 0..8 {
                let s0 = byte_at(t.w, scales + 2 * g) as i8;
                let s1 = byte_at(t.w, scales + 2 * g + 1) as i8;
                sc[2 * g] = s0 as i32;
                sc[2 * g + 1] = s1 as i32;
                sv[g] = _mm256_set_m128i(_mm_set1_epi16(s1 as i16), _mm_set1_epi16(s0 as i16));
            }
            for r in 0..R {
                let ab = r * t.arb + b * Q8K_SIZE;
                let mut sumi = _mm256_setzero_si256();
                for g in 0..8 {
                    let y = load256(t.a, ab + Q8K_QS + 32 * g);
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], y), sv[g]));
                }
                let mut sum32 = 0i32;
                for i in 0..16 {
                    sum32 += sc[i] * bsum(t.a, ab, i);
                }
                let dy = f32_at(t.a, ab);
                acc[wi][r] += d * dy * (hsum_i32(sumi) - 32 * sum32) as f32;
            }
        }
    }
    for wi in 0..WR {
        for r in 0..R {
            t.out[wi * t.ostride + r] = acc[wi][r];
        }
    }
}
