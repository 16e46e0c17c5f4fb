//! 256-bit kernels over the 16-row packed layouts of [`super::pack`], for CPUs without
//! AVX-512: each group runs as two halves of eight rows (bytes `32h..32h+32` of every 64-byte
//! chunk). With AVX-VNNI the four-byte dot products are `vpdpbusd`; on plain AVX2 they are
//! `vpmaddubsw` + `vpmaddwd`, whose 16-bit pair sums cannot overflow for 4/5/6-bit weights
//! (at most 63 * 127 * 2); Q8_0 weights use the signed `vpsignb` form there instead.
//!
//! Same sums and result layout as [`super::avx512`]; safety as there.

use std::arch::x86_64::*;

use infr_quant::GgmlType;

use super::acts::{f16_at, f32_at, i16_at, rows_fit, ActRows, Q8K_BYTES, Q8_0_BYTES, Q8_1_BYTES};
use super::pack::{PackedWeight, LANES};

const HALF: usize = 8;

#[inline(always)]
unsafe fn bcast(p: *const u8) -> __m256i {
    _mm256_set1_epi32(std::ptr::read_unaligned(p as *const i32))
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Eight f16 values as f32.
#[inline(always)]
unsafe fn f16x8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// Eight bytes as i32 lanes, unsigned or signed.
#[inline(always)]
unsafe fn u8x8(p: *const u8) -> __m256i {
    _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

#[inline(always)]
unsafe fn i8x8(p: *const u8) -> __m256i {
    _mm256_cvtepi8_epi32(_mm_loadl_epi64(p as *const __m128i))
}

/// `acc + Σ₄ w·y` per i32 lane (w unsigned, y signed).
#[inline(always)]
unsafe fn dot4<const VNNI: bool>(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
    if VNNI {
        _mm256_dpbusd_avx_epi32(acc, w, y)
    } else {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, y), _mm256_set1_epi16(1)))
    }
}

/// `acc + w·y` as sixteen i16 pair sums (`vpmaddubsw` alone): plain AVX2 keeps a few chunks'
/// products of 4- or 5-bit weights in i16 and widens them once ([`widen`]) instead of after
/// every chunk. A pair sum is at most 2·31·128 = 7,936 in magnitude (5-bit weights; 3,840 for
/// 4-bit), so four 5-bit or eight 4-bit chunks stay below 2^15.
#[inline(always)]
unsafe fn dot2_i16(acc: __m256i, w: __m256i, y: __m256i) -> __m256i {
    _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, y))
}

/// `acc` plus the eight i32 sums of adjacent i16 pairs of `part`.
#[inline(always)]
unsafe fn widen(acc: __m256i, part: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(part, _mm256_set1_epi16(1)))
}

/// The first `rows` of eight results to `out`.
#[inline(always)]
unsafe fn store(out: *mut f32, v: __m256, rows: usize) {
    if rows >= HALF {
        _mm256_storeu_ps(out, v);
    } else {
        let idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(rows as i32), idx);
        _mm256_maskstore_ps(out, mask, v);
    }
}

/// Legacy 32-value formats (`KIND`: 0 = Q4_0, 1 = Q4_1, 2 = Q5_0, 3 = Q8_0), half `h`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn legacy<const R: usize, const KIND: u8, const VNNI: bool>(
    pw: &PackedWeight,
    grp: *const u8,
    a: &ActRows<'_>,
    i0: usize,
    out: *mut f32,
    m: usize,
    h: usize,
    rows: usize,
) {
    let (nb, qb, ab) = (pw.nb, pw.shape.quant_bytes, pw.shape.aux_bytes);
    let aux0 = grp.add(nb * qb);
    let act_block = if KIND == 1 { Q8_1_BYTES } else { Q8_0_BYTES };
    let qs_at = if KIND == 1 { 4 } else { 2 };
    // Q8_0 on plain AVX2 multiplies signed values directly (no offset to remove).
    let signed = KIND == 3 && !VNNI;
    let offset: i32 = match KIND {
        0 => 8,
        2 => 16,
        3 if !signed => 128,
        _ => 0,
    };
    let nib = _mm256_set1_epi8(0x0f);
    let hbit = _mm256_set1_epi8(0x10);
    // Plain AVX2 over 4/5-bit weights sums chunks in i16 (see `dot2_i16`), widening every
    // `flush` chunks.
    let narrow = !VNNI && KIND != 3;
    let flush = if KIND == 2 { 4 } else { 8 };
    let mut accf = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let q = grp.add(b * qb + 32 * h);
        let aux = aux0.add(b * ab);
        let hq = if KIND == 2 { load(q) } else { _mm256_setzero_si256() };
        let qs = if KIND == 2 { q.add(64) } else { q };
        let ys: [*const u8; R] = std::array::from_fn(|r| a.bytes.as_ptr().add((i0 + r) * a.stride + b * act_block));
        let mut acc = [_mm256_setzero_si256(); R];
        let mut part = [_mm256_setzero_si256(); R];
        for c in 0..8 {
            let w = if KIND == 3 {
                load(qs.add(64 * c))
            } else {
                let v = load(qs.add(64 * (c % 4)));
                let n = if c < 4 { _mm256_and_si256(v, nib) } else { _mm256_and_si256(_mm256_srli_epi16(v, 4), nib) };
                if KIND == 2 {
                    // Chunk c's high bits sit at bit c of each byte; move them to bit 4.
                    let hb = if c <= 4 {
                        _mm256_sll_epi32(hq, _mm_cvtsi32_si128(4 - c as i32))
                    } else {
                        _mm256_srl_epi32(hq, _mm_cvtsi32_si128(c as i32 - 4))
                    };
                    _mm256_or_si256(n, _mm256_and_si256(hb, hbit))
                } else {
                    n
                }
            };
            if signed {
                let sw = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
                let aw = _mm256_sign_epi8(sw, sw);
                for r in 0..R {
                    let y = _mm256_sign_epi8(bcast(ys[r].add(qs_at + 4 * c)), sw);
                    acc[r] = dot4::<false>(acc[r], aw, y);
                }
            } else if narrow {
                for r in 0..R {
                    part[r] = dot2_i16(part[r], w, bcast(ys[r].add(qs_at + 4 * c)));
                    if (c + 1) % flush == 0 {
                        acc[r] = widen(acc[r], part[r]);
                        part[r] = _mm256_setzero_si256();
                    }
                }
            } else {
                for r in 0..R {
                    acc[r] = dot4::<VNNI>(acc[r], w, bcast(ys[r].add(qs_at + 4 * c)));
                }
            }
        }
        let d = f16x8(aux.add(16 * h));
        for r in 0..R {
            let mut s = acc[r];
            if offset != 0 {
                let sum = *a.sums.get_unchecked((i0 + r) * nb + b);
                s = _mm256_sub_epi32(s, _mm256_set1_epi32(offset * sum));
            }
            let dy = _mm256_set1_ps(f16_at(ys[r]));
            accf[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, dy), accf[r]);
            if KIND == 1 {
                accf[r] = _mm256_fmadd_ps(f16x8(aux.add(32 + 16 * h)), _mm256_set1_ps(f16_at(ys[r].add(2))), accf[r]);
            }
        }
    }
    for (r, v) in accf.iter().enumerate() {
        store(out.add((i0 + r) * m + HALF * h), *v, rows);
    }
}

/// Q4_K (with `Q5`: Q5_K) against Q8_K, half `h` (see `avx512::q4_k`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn q4_k<const R: usize, const Q5: bool, const VNNI: bool>(
    pw: &PackedWeight,
    grp: *const u8,
    a: &ActRows<'_>,
    i0: usize,
    out: *mut f32,
    m: usize,
    h: usize,
    rows: usize,
) {
    let (nb, qb, ab) = (pw.nb, pw.shape.quant_bytes, pw.shape.aux_bytes);
    let aux0 = grp.add(nb * qb);
    let nib = _mm256_set1_epi8(0x0f);
    let mut accf = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let q = grp.add(b * qb + 32 * h);
        let aux = aux0.add(b * ab);
        let ys: [*const u8; R] = std::array::from_fn(|r| a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES));
        let mut isum = [_mm256_setzero_si256(); R];
        let mut msum = [_mm256_setzero_si256(); R];
        for j in 0..4 {
            let mut lo = [_mm256_setzero_si256(); R];
            let mut hi = [_mm256_setzero_si256(); R];
            // Plain AVX2 sums chunks in i16 (see `dot2_i16`), widening every `flush` chunks.
            let flush = if Q5 { 4 } else { 8 };
            let mut plo = [_mm256_setzero_si256(); R];
            let mut phi = [_mm256_setzero_si256(); R];
            for c in 0..8 {
                let v = load(q.add((j * 8 + c) * 64));
                let mut wl = _mm256_and_si256(v, nib);
                let mut wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                if Q5 {
                    // Bit s of each high-bit byte is sub-block s's fifth bit: move it to bit 4.
                    let h = load(q.add(2048 + 64 * c));
                    let fifth = |s: i32| {
                        let v = if s <= 4 {
                            _mm256_sll_epi32(h, _mm_cvtsi32_si128(4 - s))
                        } else {
                            _mm256_srl_epi32(h, _mm_cvtsi32_si128(s - 4))
                        };
                        _mm256_and_si256(v, _mm256_set1_epi8(0x10))
                    };
                    wl = _mm256_or_si256(wl, fifth(2 * j as i32));
                    wh = _mm256_or_si256(wh, fifth(2 * j as i32 + 1));
                }
                for r in 0..R {
                    let y = ys[r].add(4 + 64 * j + 4 * c);
                    if VNNI {
                        lo[r] = dot4::<true>(lo[r], wl, bcast(y));
                        hi[r] = dot4::<true>(hi[r], wh, bcast(y.add(32)));
                    } else {
                        plo[r] = dot2_i16(plo[r], wl, bcast(y));
                        phi[r] = dot2_i16(phi[r], wh, bcast(y.add(32)));
                        if (c + 1) % flush == 0 {
                            lo[r] = widen(lo[r], plo[r]);
                            hi[r] = widen(hi[r], phi[r]);
                            plo[r] = _mm256_setzero_si256();
                            phi[r] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            let sc_lo = u8x8(aux.add(64 + 2 * j * 16 + HALF * h));
            let sc_hi = u8x8(aux.add(64 + (2 * j + 1) * 16 + HALF * h));
            let mn_lo = u8x8(aux.add(192 + 2 * j * 16 + HALF * h));
            let mn_hi = u8x8(aux.add(192 + (2 * j + 1) * 16 + HALF * h));
            for r in 0..R {
                let bs = ys[r].add(260);
                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(lo[r], sc_lo));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(hi[r], sc_hi));
                let s_lo = i16_at(bs.add(8 * j)) + i16_at(bs.add(8 * j + 2));
                let s_hi = i16_at(bs.add(8 * j + 4)) + i16_at(bs.add(8 * j + 6));
                msum[r] = _mm256_add_epi32(msum[r], _mm256_mullo_epi32(mn_lo, _mm256_set1_epi32(s_lo)));
                msum[r] = _mm256_add_epi32(msum[r], _mm256_mullo_epi32(mn_hi, _mm256_set1_epi32(s_hi)));
            }
        }
        let d = f16x8(aux.add(16 * h));
        let dmin = f16x8(aux.add(32 + 16 * h));
        for r in 0..R {
            let dy = _mm256_set1_ps(f32_at(ys[r]));
            accf[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, dy), accf[r]);
            accf[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[r]), _mm256_mul_ps(dmin, dy), accf[r]);
        }
    }
    for (r, v) in accf.iter().enumerate() {
        store(out.add((i0 + r) * m + HALF * h), *v, rows);
    }
}

/// Q6_K against Q8_K, half `h` (see `avx512::q6_k`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn q6_k<const R: usize, const VNNI: bool>(
    pw: &PackedWeight,
    grp: *const u8,
    a: &ActRows<'_>,
    i0: usize,
    out: *mut f32,
    m: usize,
    h: usize,
    rows: usize,
) {
    let (nb, qb, ab) = (pw.nb, pw.shape.quant_bytes, pw.shape.aux_bytes);
    let aux0 = grp.add(nb * qb);
    let nib = _mm256_set1_epi8(0x0f);
    let m03 = _mm256_set1_epi8(0x03);
    let m30 = _mm256_set1_epi8(0x30);
    let mut accf = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let q = grp.add(b * qb + 32 * h);
        let aux = aux0.add(b * ab);
        let ys: [*const u8; R] = std::array::from_fn(|r| a.bytes.as_ptr().add((i0 + r) * a.stride + b * Q8K_BYTES));
        let mut isum = [_mm256_setzero_si256(); R];
        for n in 0..2 {
            for half in 0..2 {
                let mut acc = [[_mm256_setzero_si256(); 4]; R];
                for c in 4 * half..4 * half + 4 {
                    let base = q.add((n * 8 + c) * 3 * 64);
                    let (la, lb, hq) = (load(base), load(base.add(64)), load(base.add(128)));
                    let w = [
                        _mm256_or_si256(_mm256_and_si256(la, nib), _mm256_slli_epi16(_mm256_and_si256(hq, m03), 4)),
                        _mm256_or_si256(
                            _mm256_and_si256(lb, nib),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hq, 2), m03), 4),
                        ),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(la, 4), nib), _mm256_and_si256(hq, m30)),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(lb, 4), nib),
                            _mm256_and_si256(_mm256_srli_epi16(hq, 2), m30),
                        ),
                    ];
                    for r in 0..R {
                        let y = ys[r].add(4 + 128 * n + 4 * c);
                        for k in 0..4 {
                            acc[r][k] = dot4::<VNNI>(acc[r][k], w[k], bcast(y.add(32 * k)));
                        }
                    }
                }
                for k in 0..4 {
                    let g = 8 * n + 2 * k + half;
                    let sc = i8x8(aux.add(32 + g * 16 + HALF * h));
                    for r in 0..R {
                        let off = _mm256_set1_epi32(32 * i16_at(ys[r].add(260 + 2 * g)));
                        isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(_mm256_sub_epi32(acc[r][k], off), sc));
                    }
                }
            }
        }
        let d = f16x8(aux.add(16 * h));
        for r in 0..R {
            let dy = _mm256_set1_ps(f32_at(ys[r]));
            accf[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, dy), accf[r]);
        }
    }
    for (r, v) in accf.iter().enumerate() {
        store(out.add((i0 + r) * m + HALF * h), *v, rows);
    }
}

/// Activation rows per kernel call (16 ymm registers: each row takes an integer and a float
/// accumulator beside the weight vector and the constants).
pub(crate) const ROWS_PER_CALL: usize = 4;

/// Both halves of group `g` for activation rows `i0..i0+n`.
#[inline(always)]
unsafe fn group<const VNNI: bool>(
    pw: &PackedWeight,
    g: usize,
    a: &ActRows<'_>,
    i0: usize,
    n: usize,
    out: *mut f32,
    m: usize,
) -> bool {
    if n > ROWS_PER_CALL || !rows_fit(pw, g, a, i0, n) {
        return false;
    }
    let valid = (pw.rows - g * LANES).min(LANES);
    let grp = pw.group(g).as_ptr();
    let out = out.add(g * LANES);
    for h in 0..valid.div_ceil(HALF) {
        let rows = (valid - HALF * h).min(HALF);
        macro_rules! run {
            ($f:ident $(, $k:literal)?) => {
                match n {
                    1 => $f::<1, $($k,)? VNNI>(pw, grp, a, i0, out, m, h, rows),
                    2 => $f::<2, $($k,)? VNNI>(pw, grp, a, i0, out, m, h, rows),
                    3 => $f::<3, $($k,)? VNNI>(pw, grp, a, i0, out, m, h, rows),
                    _ => $f::<4, $($k,)? VNNI>(pw, grp, a, i0, out, m, h, rows),
                }
            };
        }
        match pw.ty {
            GgmlType::Q4_0 => run!(legacy, 0),
            GgmlType::Q4_1 => run!(legacy, 1),
            GgmlType::Q5_0 => run!(legacy, 2),
            GgmlType::Q8_0 => run!(legacy, 3),
            GgmlType::Q4_K => run!(q4_k, false),
            GgmlType::Q5_K => run!(q4_k, true),
            GgmlType::Q6_K => run!(q6_k),
            _ => return false,
        }
    }
    true
}

/// [`super::avx512::group_rows`] on AVX2 (`vpmaddubsw`).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `out` as for `avx512::group_rows`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn group_rows(
    pw: &PackedWeight,
    g: usize,
    a: &ActRows<'_>,
    i0: usize,
    n: usize,
    out: *mut f32,
    m: usize,
) -> bool {
    group::<false>(pw, g, a, i0, n, out, m)
}

/// [`super::avx512::group_rows`] on AVX2 with AVX-VNNI (`vpdpbusd` on 256 bits).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI; `out` as for `avx512::group_rows`.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub(crate) unsafe fn group_rows_vnni(
    pw: &PackedWeight,
    g: usize,
    a: &ActRows<'_>,
    i0: usize,
    n: usize,
    out: *mut f32,
    m: usize,
) -> bool {
    group::<true>(pw, g, a, i0, n, out, m)
}
