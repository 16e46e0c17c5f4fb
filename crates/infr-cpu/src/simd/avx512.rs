//! AVX-512 VNNI kernels over the 16-row packed layouts of [`super::pack`]: one 512-bit lane
//! per weight row, activation bytes broadcast four at a time, `vpdpbusd` (unsigned weight
//! byte x signed activation byte, summed in fours) into 16 row accumulators.
//!
//! Each kernel computes `R` activation rows against one 16-row group, over the whole row,
//! and stores `out[i * m + row]` for the group's valid rows. The sums are the ones
//! llama.cpp's `ggml_vec_dot_*_q8_*` compute (unsigned weight offsets are subtracted with the
//! activation block sums, as its `bsums` trick does for k-quants).
//!
//! Safety: every function is `unsafe` (AVX-512 intrinsics, raw pointers); [`group_rows`]
//! checks all lengths once, the kernels trust them.

use std::arch::x86_64::*;

use infr_quant::GgmlType;

use super::acts::{f16_at, f32_at, i16_at, rows_fit, ActRows, Q8K_BYTES, Q8_0_BYTES, Q8_1_BYTES};
use super::pack::{PackedWeight, LANES};

#[inline(always)]
unsafe fn bcast(p: *const u8) -> __m512i {
    _mm512_set1_epi32(std::ptr::read_unaligned(p as *const i32))
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

#[inline(always)]
unsafe fn f16x16(p: *const u8) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// `rows` of the group's results (lanes) for activation row `i` to `out[i * m ..]`.
#[inline(always)]
unsafe fn store(out: *mut f32, v: __m512, rows: usize) {
    let mask: __mmask16 = if rows >= 16 { 0xFFFF } else { (1u16 << rows) - 1 };
    _mm512_mask_storeu_ps(out, mask, v);
}

/// The legacy 32-value formats (`KIND`: 0 = Q4_0, 1 = Q4_1, 2 = Q5_0, 3 = Q8_0).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
unsafe fn legacy<const R: usize, const KIND: u8>(
    pw: &PackedWeight,
    grp: *const u8,
    a: &ActRows<'_>,
    i0: usize,
    out: *mut f32,
    m: usize,
    rows: usize,
) {
    let nb = pw.nb;
    let qb = pw.shape.quant_bytes;
    let ab = pw.shape.aux_bytes;
    let aux0 = grp.add(nb * qb);
    let act_block = if KIND == 1 { Q8_1_BYTES } else { Q8_0_BYTES };
    let qs_at = if KIND == 1 { 4 } else { 2 };
    let offset = match KIND {
        0 => 8,
        2 => 16,
        3 => 128,
        _ => 0,
    };
    let nib = _mm512_set1_epi8(0x0f);
    let hbit = _mm512_set1_epi8(0x10);
    let mut accf = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let q = grp.add(b * qb);
        let aux = aux0.add(b * ab);
        let mut w = [_mm512_setzero_si512(); 8];
        match KIND {
            3 => {
                for (c, wc) in w.iter_mut().enumerate() {
                    *wc = load(q.add(64 * c));
                }
            }
            _ => {
                let (qs, h) = if KIND == 2 { (q.add(64), load(q)) } else { (q, _mm512_setzero_si512()) };
                for c in 0..4 {
                    let v = load(qs.add(64 * c));
                    w[c] = _mm512_and_si512(v, nib);
                    w[c + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                }
                if KIND == 2 {
                    // Chunk c's high bits sit at bit c of each byte; move them to bit 4.
                    w[0] = _mm512_or_si512(w[0], _mm512_and_si512(_mm512_slli_epi32(h, 4), hbit));
                    w[1] = _mm512_or_si512(w[1], _mm512_and_si512(_mm512_slli_epi32(h, 3), hbit));
                    w[2] = _mm512_or_si512(w[2], _mm512_and_si512(_mm512_slli_epi32(h, 2), hbit));
                    w[3] = _mm512_or_si512(w[3], _mm512_and_si512(_mm512_slli_epi32(h, 1), hbit));
                    w[4] = _mm512_or_si512(w[4], _mm512_and_si512(h, hbit));
                    w[5] = _mm512_or_si512(w[5], _mm512_and_si512(_mm512_srli_epi32(h, 1), hbit));
                    w[6] = _mm512_or_si512(w[6], _mm512_and_si512(_mm512_srli_epi32(h, 2), hbit));
                    w[7] = _mm512_or_si512(w[7], _mm512_and_si512(_mm512_srli_epi32(h, 3), hbit));
                }
            }
        }
        let d = f16x16(aux);
        for r in 0..R {
            let y = a.bytes.as_ptr().add((i0 + r) * a.stride + b * act_block);
            let mut acc = _mm512_setzero_si512();
            for (c, wc) in w.iter().enumerate() {
                acc = _mm512_dpbusd_epi32(acc, *wc, bcast(y.add(qs_at + 4 * c)));
            }
            if offset != 0 {
                let s = *a.sums.get_unchecked((i0 + r) * nb + b);
                acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(offset * s));
            }
            let dy = _mm512_set1_ps(f16_at(y));
            accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), _mm512_mul_ps(d, dy), accf[r]);
            if KIND == 1 {
                // Q4_1: + min * (d_y * sum y), the sum as the f16 `s` of the Q8_1 block.
                accf[r] = _mm512_fmadd_ps(f16x16(aux.add(32)), _mm512_set1_ps(f16_at(y.add(2))), accf[r]);
            }
        }
    }
    for (r, v) in accf.iter().enumerate() {
        store(out.add((i0 + r) * m), *v, rows);
    }
}

/// Q4_K (and with `Q5`, Q5_K's fifth bits) against Q8_K: per 32-value sub-block an integer
/// dot times the row's 6-bit scale, minus the 6-bit min times the activation sub-block sum
/// (`ggml_vec_dot_q4_K_q8_K`, `ggml_vec_dot_q5_K_q8_K`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
unsafe fn q4_k<const R: usize, const Q5: bool>(
    pw: &PackedWeight,
    grp: *const u8,
    a: &ActRows<'_>,
    i0: usize,
    out: *mut f32,
    m: usize,
    rows: usize,
) {
    let nb = pw.nb;
    let qb = pw.shape.quant_bytes;
    let ab = pw.shape.aux_bytes;
    let aux0 = grp.add(nb * qb);
    let nib = _mm512_set1_epi8(0x0f);
    let mut accf = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let q = grp.add(b * qb);
        let aux = aux0.add(b * ab);
        let mut isum = [_mm512_setzero_si512(); R];
        let mut msum = [_mm512_setzero_si512(); R];
        for j in 0..4 {
            let mut lo = [_mm512_setzero_si512(); R];
            let mut hi = [_mm512_setzero_si512(); R];
            for c in 0..8 {
                let v = load(q.add((j * 8 + c) * 64));
                let mut wl = _mm512_and_si512(v, nib);
                let mut wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                if Q5 {
                    // Bit s of each high-bit byte is sub-block s's fifth bit: move it to bit 4.
                    let h = load(q.add(2048 + 64 * c));
                    let fifth = |s: i32| {
                        let v = if s <= 4 {
                            _mm512_sll_epi32(h, _mm_cvtsi32_si128(4 - s))
                        } else {
                            _mm512_srl_epi32(h, _mm_cvtsi32_si128(s - 4))
                        };
                        _mm512_and_si512(v, _mm512_set1_epi8(0x10))
                    };
                    wl = _mm512_or_si512(wl, fifth(2 * j as i32));
                    wh = _mm512_or_si512(wh, fifth(2 * j as i32 + 1));
                }
                for r in 0..R {
                    let y = a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES + 4 + 64 * j + 4 * c);
                    lo[r] = _mm512_dpbusd_epi32(lo[r], wl, bcast(y));
                    hi[r] = _mm512_dpbusd_epi32(hi[r], wh, bcast(y.add(32)));
                }
            }
            let sc_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(aux.add(64 + 2 * j * 16) as *const __m128i));
            let sc_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(aux.add(64 + (2 * j + 1) * 16) as *const __m128i));
            let mn_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(aux.add(192 + 2 * j * 16) as *const __m128i));
            let mn_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(aux.add(192 + (2 * j + 1) * 16) as *const __m128i));
            for r in 0..R {
                let ya = a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES + 260);
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(lo[r], sc_lo));
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(hi[r], sc_hi));
                let s_lo = i16_at(ya.add(8 * j)) + i16_at(ya.add(8 * j + 2));
                let s_hi = i16_at(ya.add(8 * j + 4)) + i16_at(ya.add(8 * j + 6));
                msum[r] = _mm512_add_epi32(msum[r], _mm512_mullo_epi32(mn_lo, _mm512_set1_epi32(s_lo)));
                msum[r] = _mm512_add_epi32(msum[r], _mm512_mullo_epi32(mn_hi, _mm512_set1_epi32(s_hi)));
            }
        }
        let d = f16x16(aux);
        let dmin = f16x16(aux.add(32));
        for r in 0..R {
            let dy = _mm512_set1_ps(f32_at(a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES)));
            accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, dy), accf[r]);
            accf[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[r]), _mm512_mul_ps(dmin, dy), accf[r]);
        }
    }
    for (r, v) in accf.iter().enumerate() {
        store(out.add((i0 + r) * m), *v, rows);
    }
}

/// Q6_K against Q8_K: unsigned 6-bit values, an i8 scale per 16 values, and the `-32` offset
/// applied through the activation's 16-value sums (`ggml_vec_dot_q6_K_q8_K`).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
unsafe fn q6_k<const R: usize>(
    pw: &PackedWeight,
    grp: *const u8,
    a: &ActRows<'_>,
    i0: usize,
    out: *mut f32,
    m: usize,
    rows: usize,
) {
    let nb = pw.nb;
    let qb = pw.shape.quant_bytes;
    let ab = pw.shape.aux_bytes;
    let aux0 = grp.add(nb * qb);
    let nib = _mm512_set1_epi8(0x0f);
    let m03 = _mm512_set1_epi8(0x03);
    let m30 = _mm512_set1_epi8(0x30);
    let mut accf = [_mm512_setzero_ps(); R];
    for b in 0..nb {
        let q = grp.add(b * qb);
        let aux = aux0.add(b * ab);
        let mut isum = [_mm512_setzero_si512(); R];
        for n in 0..2 {
            for half in 0..2 {
                // Four scale groups: values 128n + 32k + 16*half .. +16, k = 0..4.
                let mut acc = [[_mm512_setzero_si512(); 4]; R];
                for c in 4 * half..4 * half + 4 {
                    let base = q.add((n * 8 + c) * 3 * 64);
                    let la = load(base);
                    let lb = load(base.add(64));
                    let h = load(base.add(128));
                    let w = [
                        _mm512_or_si512(_mm512_and_si512(la, nib), _mm512_slli_epi16(_mm512_and_si512(h, m03), 4)),
                        _mm512_or_si512(
                            _mm512_and_si512(lb, nib),
                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2), m03), 4),
                        ),
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(la, 4), nib), _mm512_and_si512(h, m30)),
                        _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16(lb, 4), nib),
                            _mm512_and_si512(_mm512_srli_epi16(h, 2), m30),
                        ),
                    ];
                    for r in 0..R {
                        let y = a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES + 4 + 128 * n + 4 * c);
                        for k in 0..4 {
                            acc[r][k] = _mm512_dpbusd_epi32(acc[r][k], w[k], bcast(y.add(32 * k)));
                        }
                    }
                }
                for k in 0..4 {
                    let g = 8 * n + 2 * k + half;
                    let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(aux.add(32 + g * 16) as *const __m128i));
                    for r in 0..R {
                        let ya = a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES + 260);
                        let off = _mm512_set1_epi32(32 * i16_at(ya.add(2 * g)));
                        isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(_mm512_sub_epi32(acc[r][k], off), sc));
                    }
                }
            }
        }
        let d = f16x16(aux);
        for r in 0..R {
            let dy = _mm512_set1_ps(f32_at(a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES)));
            accf[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, dy), accf[r]);
        }
    }
    for (r, v) in accf.iter().enumerate() {
        store(out.add((i0 + r) * m), *v, rows);
    }
}

/// Activation rows computed together per kernel call during prefill.
pub(crate) fn rows_per_call(ty: GgmlType) -> usize {
    if ty == GgmlType::Q6_K {
        2
    } else {
        4
    }
}

/// `out[i * m + 16g + l]` for activation rows `i0..i0+n` (n <= [`rows_per_call`]) and the
/// valid rows `l` of group `g`. Returns false (writing nothing) if a length is inconsistent.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI; `out` must be valid for writes at
/// `[i * m + 16g, i * m + 16g + valid rows)` for every row `i` of the call, and no other
/// thread may write there concurrently.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
pub(crate) unsafe fn group_rows(
    pw: &PackedWeight,
    g: usize,
    a: &ActRows<'_>,
    i0: usize,
    n: usize,
    out: *mut f32,
    m: usize,
) -> bool {
    if n > rows_per_call(pw.ty) || !rows_fit(pw, g, a, i0, n) {
        return false;
    }
    let rows = (pw.rows - g * LANES).min(LANES);
    let grp = pw.group(g).as_ptr();
    let out = out.add(g * LANES);
    macro_rules! by_rows {
        ($f:ident $(, $k:literal)?) => {
            match n {
                1 => $f::<1 $(, $k)?>(pw, grp, a, i0, out, m, rows),
                2 => $f::<2 $(, $k)?>(pw, grp, a, i0, out, m, rows),
                3 => $f::<3 $(, $k)?>(pw, grp, a, i0, out, m, rows),
                _ => $f::<4 $(, $k)?>(pw, grp, a, i0, out, m, rows),
            }
        };
    }
    match pw.ty {
        GgmlType::Q4_0 => by_rows!(legacy, 0),
        GgmlType::Q4_1 => by_rows!(legacy, 1),
        GgmlType::Q5_0 => by_rows!(legacy, 2),
        GgmlType::Q8_0 => by_rows!(legacy, 3),
        GgmlType::Q4_K => by_rows!(q4_k, false),
        GgmlType::Q5_K => by_rows!(q4_k, true),
        GgmlType::Q6_K => match n {
            1 => q6_k::<1>(pw, grp, a, i0, out, m, rows),
            _ => q6_k::<2>(pw, grp, a, i0, out, m, rows),
        },
        _ => return false,
    }
    true
}
