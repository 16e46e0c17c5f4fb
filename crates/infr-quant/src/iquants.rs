//! i-quants: lattice/grid formats (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and
//! the non-linear IQ4_NL / IQ4_XS.
//!
//! Dequantizers mirror `dequantize_row_iq*` in llama.cpp's `ggml/src/ggml-quants.c`; the IQ4
//! quantizers mirror `quantize_row_iq4_nl_ref` / `quantize_row_iq4_xs_ref` (both go through
//! `quantize_row_iq4_nl_impl`). The grid quantizers need ggml's neighbour search tables and
//! are not implemented.

use crate::blocks::{
    BlockIQ1_M, BlockIQ1_S, BlockIQ2_S, BlockIQ2_XS, BlockIQ2_XXS, BlockIQ3_S, BlockIQ3_XXS, BlockIQ4_NL, BlockIQ4_XS,
};
use crate::float::{f16_to_f32, f32_to_f16, read_f16};
use crate::iq1_tables::IQ1S_GRID;
use crate::iq_tables::{
    IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID, KMASK_IQ2XS, KSIGNS_IQ2XS, KVALUES_IQ4NL,
};
use crate::kquants::nearest_int;
use crate::types::QK_K;

/// The shift added to every IQ1_S / IQ1_M grid value, with the sign given per group
/// (`IQ1S_DELTA` in `ggml-common.h`).
pub const IQ1S_DELTA: f32 = 0.125;

#[inline]
fn rd16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

#[inline]
fn rd32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Byte `j` of a packed grid entry.
#[inline]
fn gbyte(grid: u64, j: usize) -> u8 {
    (grid >> (8 * j)) as u8
}

/// ±1 for sign bit `j` of `signs` (set means negative).
#[inline]
fn sign(signs: u8, j: usize) -> f32 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -1.0
    } else {
        1.0
    }
}

/// Write 8 values `db * grid[j] * sign_j` (the IQ2 pattern).
#[inline]
fn put8(y: &mut [f32], db: f32, grid: u64, signs: u8) {
    for j in 0..8 {
        y[j] = db * gbyte(grid, j) as f32 * sign(signs, j);
    }
}

pub(crate) fn dequantize_iq2_xxs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ2_XXS::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ2_XXS::OFF_D);
        for ib in 0..8 {
            let o = BlockIQ2_XXS::OFF_QS + 8 * ib;
            let aux1 = rd32(b, o + 4);
            let db = d * (0.5 + (aux1 >> 28) as f32) * 0.25;
            for l in 0..4 {
                let grid = IQ2XXS_GRID[b[o + l] as usize];
                let signs = KSIGNS_IQ2XS[((aux1 >> (7 * l)) & 127) as usize];
                put8(&mut y[32 * ib + 8 * l..], db, grid, signs);
            }
        }
    }
}

pub(crate) fn dequantize_iq2_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ2_XS::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ2_XS::OFF_D);
        for ib in 0..8 {
            let sc = b[BlockIQ2_XS::OFF_SCALES + ib];
            let db = [d * (0.5 + (sc & 0xf) as f32) * 0.25, d * (0.5 + (sc >> 4) as f32) * 0.25];
            for l in 0..4 {
                let q = rd16(b, BlockIQ2_XS::OFF_QS + 2 * (4 * ib + l));
                let grid = IQ2XS_GRID[(q & 511) as usize];
                let signs = KSIGNS_IQ2XS[(q >> 9) as usize];
                put8(&mut y[32 * ib + 8 * l..], db[l / 2], grid, signs);
            }
        }
    }
}

pub(crate) fn dequantize_iq2_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ2_S::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ2_S::OFF_D);
        let qs = &b[BlockIQ2_S::OFF_QS..BlockIQ2_S::OFF_QS + 64];
        let qh = &b[BlockIQ2_S::OFF_QH..BlockIQ2_S::OFF_QH + 8];
        for ib in 0..8 {
            let sc = b[BlockIQ2_S::OFF_SCALES + ib];
            let db = [d * (0.5 + (sc & 0xf) as f32) * 0.25, d * (0.5 + (sc >> 4) as f32) * 0.25];
            for l in 0..4 {
                let idx = qs[4 * ib + l] as usize | (((qh[ib] as usize) << (8 - 2 * l)) & 0x300);
                let signs = qs[32 + 4 * ib + l];
                put8(&mut y[32 * ib + 8 * l..], db[l / 2], IQ2S_GRID[idx], signs);
            }
        }
    }
}

pub(crate) fn dequantize_iq3_xxs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ3_XXS::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ3_XXS::OFF_D);
        let qs = &b[BlockIQ3_XXS::OFF_QS..BlockIQ3_XXS::OFF_QS + 96];
        for ib in 0..8 {
            let aux = rd32(qs, 64 + 4 * ib);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for l in 0..4 {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let g1 = IQ3XXS_GRID[qs[8 * ib + 2 * l] as usize] as u64;
                let g2 = IQ3XXS_GRID[qs[8 * ib + 2 * l + 1] as usize] as u64;
                let yo = &mut y[32 * ib + 8 * l..32 * ib + 8 * l + 8];
                for j in 0..4 {
                    yo[j] = db * gbyte(g1, j) as f32 * sign(signs, j);
                    yo[j + 4] = db * gbyte(g2, j) as f32 * sign(signs, j + 4);
                }
            }
        }
    }
}

pub(crate) fn dequantize_iq3_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ3_S::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ3_S::OFF_D);
        let qs = &b[BlockIQ3_S::OFF_QS..BlockIQ3_S::OFF_QS + 64];
        let qh = &b[BlockIQ3_S::OFF_QH..BlockIQ3_S::OFF_QH + 8];
        let signs = &b[BlockIQ3_S::OFF_SIGNS..BlockIQ3_S::OFF_SIGNS + 32];
        for k in 0..4 {
            let sc = b[BlockIQ3_S::OFF_SCALES + k];
            let dbs = [d * (1 + 2 * (sc & 0xf) as i32) as f32, d * (1 + 2 * (sc >> 4) as i32) as f32];
            for (h, &db) in dbs.iter().enumerate() {
                let (q, hb, s) = (&qs[16 * k + 8 * h..], qh[2 * k + h] as usize, &signs[8 * k + 4 * h..]);
                for l in 0..4 {
                    let g1 = IQ3S_GRID[q[2 * l] as usize | ((hb << (8 - 2 * l)) & 256)] as u64;
                    let g2 = IQ3S_GRID[q[2 * l + 1] as usize | ((hb << (7 - 2 * l)) & 256)] as u64;
                    let o = 64 * k + 32 * h + 8 * l;
                    let yo = &mut y[o..o + 8];
                    for j in 0..4 {
                        yo[j] = db * gbyte(g1, j) as f32 * sign(s[l], j);
                        yo[j + 4] = db * gbyte(g2, j) as f32 * sign(s[l], j + 4);
                    }
                }
            }
        }
    }
}

/// Write 8 values `dl * (grid[j] + delta)` from a signed IQ1 grid entry.
#[inline]
fn put8_iq1(y: &mut [f32], dl: f32, grid: u64, delta: f32) {
    for j in 0..8 {
        y[j] = dl * (gbyte(grid, j) as i8 as f32 + delta);
    }
}

pub(crate) fn dequantize_iq1_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ1_S::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ1_S::OFF_D);
        for ib in 0..8 {
            let qh = rd16(b, BlockIQ1_S::OFF_QH + 2 * ib) as usize;
            let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
            for l in 0..4 {
                let idx = b[BlockIQ1_S::OFF_QS + 4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8);
                put8_iq1(&mut y[32 * ib + 8 * l..], dl, IQ1S_GRID[idx], delta);
            }
        }
    }
}

/// The f16 super-block scale of an IQ1_M block, scattered over the top nibbles of its four
/// little-endian u16 scale words.
pub fn iq1_m_scale(scales: &[u8; 8]) -> f32 {
    let sc = |i: usize| u16::from_le_bytes([scales[2 * i], scales[2 * i + 1]]);
    f16_to_f32((sc(0) >> 12) | ((sc(1) >> 8) & 0x00f0) | ((sc(2) >> 4) & 0x0f00) | (sc(3) & 0xf000))
}

pub(crate) fn dequantize_iq1_m(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ1_M::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let mut scales = [0u8; 8];
        scales.copy_from_slice(&b[BlockIQ1_M::OFF_SCALES..BlockIQ1_M::OFF_SCALES + 8]);
        let d = iq1_m_scale(&scales);
        for ib in 0..8 {
            let sc = rd16(&scales, 2 * (ib / 2)) as usize;
            let dl1 = d * (2 * ((sc >> (6 * (ib % 2))) & 7) + 1) as f32;
            let dl2 = d * (2 * ((sc >> (6 * (ib % 2) + 3)) & 7) + 1) as f32;
            let qs = &b[BlockIQ1_M::OFF_QS + 4 * ib..BlockIQ1_M::OFF_QS + 4 * ib + 4];
            let qh = [b[BlockIQ1_M::OFF_QH + 2 * ib] as usize, b[BlockIQ1_M::OFF_QH + 2 * ib + 1] as usize];
            let delta = |v: usize| if v != 0 { -IQ1S_DELTA } else { IQ1S_DELTA };
            let idx = [
                qs[0] as usize | ((qh[0] << 8) & 0x700),
                qs[1] as usize | ((qh[0] << 4) & 0x700),
                qs[2] as usize | ((qh[1] << 8) & 0x700),
                qs[3] as usize | ((qh[1] << 4) & 0x700),
            ];
            let deltas = [delta(qh[0] & 0x08), delta(qh[0] & 0x80), delta(qh[1] & 0x08), delta(qh[1] & 0x80)];
            for l in 0..4 {
                let dl = if l < 2 { dl1 } else { dl2 };
                put8_iq1(&mut y[32 * ib + 8 * l..], dl, IQ1S_GRID[idx[l]], deltas[l]);
            }
        }
    }
}

pub(crate) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ4_NL::SIZE).zip(dst.chunks_exact_mut(32)) {
        let d = read_f16(b, BlockIQ4_NL::OFF_D);
        let qs = &b[BlockIQ4_NL::OFF_QS..];
        for j in 0..16 {
            y[j] = d * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
            y[j + 16] = d * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
        }
    }
}

pub(crate) fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockIQ4_XS::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockIQ4_XS::OFF_D);
        let scales_h = rd16(b, BlockIQ4_XS::OFF_SCALES_H) as i32;
        for ib in 0..8 {
            let lo = ((b[BlockIQ4_XS::OFF_SCALES_L + ib / 2] >> (4 * (ib % 2))) & 0xf) as i32;
            let ls = lo | (((scales_h >> (2 * ib)) & 3) << 4);
            let dl = d * (ls - 32) as f32;
            let qs = &b[BlockIQ4_XS::OFF_QS + 16 * ib..BlockIQ4_XS::OFF_QS + 16 * ib + 16];
            for j in 0..16 {
                y[32 * ib + j] = dl * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
                y[32 * ib + j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
            }
        }
    }
}

/// Index of the level in the sorted table `val` nearest to `x` (`best_index_int8`).
#[inline]
pub fn best_index_int8(val: &[i8; 16], x: f32) -> u8 {
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < val[mu] as f32 - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// `quantize_row_iq4_nl_impl` without importance weights, for one super-block of `x.len()`
/// values in groups of 32. `l` persists across calls, as ggml's stack buffer does (an all-zero
/// IQ4_NL group keeps the previous group's indices). Returns the f16 bits of `d`, `scales_h`
/// and `scales_l`; writes the packed nibbles to `q4`.
fn iq4_impl(x: &[f32], l: &mut [u8], q4: &mut [u8], ntry: i32) -> (u16, u16, [u8; 4]) {
    const GROUP_MAX_EPS: f32 = 1e-15;
    let values = &KVALUES_IQ4NL;
    let nb = x.len() / 32;
    let mut scales = [0f32; 8];
    let (mut max_scale, mut amax_scale) = (0.0f32, 0.0f32);
    for ib in 0..nb {
        let xb = &x[32 * ib..32 * ib + 32];
        let lb = &mut l[32 * ib..32 * ib + 32];
        let weight: [f32; 32] = core::array::from_fn(|j| xb[j] * xb[j]);
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        let v0 = values[0] as f32;
        let mut d = if ntry > 0 { -max / v0 } else { max / v0 };
        let mut id = 1.0 / d;
        let (mut sumqx, mut sumq2) = (0.0f32, 0.0f32);
        for j in 0..32 {
            let li = best_index_int8(values, id * xb[j]);
            lb[j] = li;
            let q = values[li as usize] as f32;
            let w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -ntry..=ntry {
            id = (itry + values[0] as i32) as f32 / max;
            sumqx = 0.0;
            sumq2 = 0.0;
            for j in 0..32 {
                let q = values[best_index_int8(values, id * xb[j]) as usize] as f32;
                let w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    let (mut scales_h, mut scales_l) = (0u16, [0u8; 4]);
    let dh;
    if nb > 1 {
        let d = -max_scale / 32.0;
        dh = f32_to_f16(d);
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        for ib in 0..nb {
            let li = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * li as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 32 * ib..32 * ib + 32 {
                l[j] = best_index_int8(values, idl * x[j]);
            }
            let li = (li + 32) as u8;
            if ib % 2 == 0 {
                scales_l[ib / 2] = li & 0xf;
            } else {
                scales_l[ib / 2] |= (li & 0xf) << 4;
            }
            scales_h |= ((li >> 4) as u16) << (2 * (ib % 8));
        }
    } else {
        dh = f32_to_f16(scales[0]);
        if ntry > 0 {
            let id = if scales[0] != 0.0 { 1.0 / scales[0] } else { 0.0 };
            for j in 0..x.len() {
                l[j] = best_index_int8(values, id * x[j]);
            }
        }
    }
    for i in 0..nb {
        for j in 0..16 {
            q4[16 * i + j] = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
    (dh, scales_h, scales_l)
}

pub(crate) fn quantize_iq4_nl(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; 32];
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(BlockIQ4_NL::SIZE)) {
        let (dh, _, _) = iq4_impl(x, &mut l, &mut b[BlockIQ4_NL::OFF_QS..BlockIQ4_NL::OFF_QS + 16], -1);
        b[BlockIQ4_NL::OFF_D..BlockIQ4_NL::OFF_D + 2].copy_from_slice(&dh.to_le_bytes());
    }
}

pub(crate) fn quantize_iq4_xs(src: &[f32], dst: &mut [u8]) {
    let mut l = [0u8; QK_K];
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockIQ4_XS::SIZE)) {
        let (dh, sh, sl) = iq4_impl(x, &mut l, &mut b[BlockIQ4_XS::OFF_QS..BlockIQ4_XS::OFF_QS + 128], 7);
        b[BlockIQ4_XS::OFF_D..BlockIQ4_XS::OFF_D + 2].copy_from_slice(&dh.to_le_bytes());
        b[BlockIQ4_XS::OFF_SCALES_H..BlockIQ4_XS::OFF_SCALES_H + 2].copy_from_slice(&sh.to_le_bytes());
        b[BlockIQ4_XS::OFF_SCALES_L..BlockIQ4_XS::OFF_SCALES_L + 4].copy_from_slice(&sl);
    }
}
