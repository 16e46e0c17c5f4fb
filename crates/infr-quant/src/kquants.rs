//! k-quants (Q2_K … Q6_K, Q8_K): 256-element super-blocks with quantized per-group scales.
//!
//! Dequantizers mirror `dequantize_row_q{2..6}_K` / `dequantize_row_q8_K` in llama.cpp's
//! `ggml/src/ggml-quants.c`; the scale-unpacking helpers are shared with the fast kernels.
//! The weight quantizers live in [`crate::kquants_quant`].

use crate::blocks::{BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K, BlockQ6_K, BlockQ8_K};
use crate::float::read_f16;
use crate::types::QK_K;

/// 6-bit scale and min of group `j` (0..8) of a Q4_K/Q5_K block from its 12 packed bytes
/// (`get_scale_min_k4`): groups 0..3 use the low 6 bits of bytes `j` / `j+4`, groups 4..7
/// combine a nibble of byte `j+4` with the top 2 bits of bytes `j-4` / `j`.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// The 16 signed group scales (`raw - 32`, in -32..=31) of a Q3_K block from its 12 packed
/// bytes: low nibbles in bytes 0..8, high 2-bit pairs in bytes 8..12.
pub fn unpack_q3_k_scales(s: &[u8; 12]) -> [i8; 16] {
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let rd = |o: usize| u32::from_le_bytes([s[o], s[o + 1], s[o + 2], s[o + 3]]);
    let (a0, a1, tmp) = (rd(0), rd(4), rd(8));
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = ((aux[i / 4] >> (8 * (i % 4))) & 0xFF) as i8 - 32;
    }
    out
}

/// Copy 12 bytes starting at `off` into an array (blocks are already length-checked).
#[inline]
pub(crate) fn scales12(b: &[u8], off: usize) -> [u8; 12] {
    let mut s = [0u8; 12];
    s.copy_from_slice(&b[off..off + 12]);
    s
}

pub(crate) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ2_K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockQ2_K::OFF_D);
        let min = read_f16(b, BlockQ2_K::OFF_DMIN);
        let scales = &b[BlockQ2_K::OFF_SCALES..BlockQ2_K::OFF_SCALES + 16];
        let mut out = 0;
        let mut is = 0;
        for n in 0..2 {
            let q = &b[BlockQ2_K::OFF_QS + 32 * n..BlockQ2_K::OFF_QS + 32 * n + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let sc = scales[is];
                    is += 1;
                    let dl = d * (sc & 0xF) as f32;
                    let ml = min * (sc >> 4) as f32;
                    for l in 0..16 {
                        y[out] = dl * ((q[l + 16 * half] >> shift) & 3) as f32 - ml;
                        out += 1;
                    }
                }
            }
        }
    }
}

pub(crate) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ3_K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d_all = read_f16(b, BlockQ3_K::OFF_D);
        let scales = unpack_q3_k_scales(&scales12(b, BlockQ3_K::OFF_SCALES));
        let hm = &b[BlockQ3_K::OFF_HMASK..BlockQ3_K::OFF_HMASK + 32];
        let mut out = 0;
        let mut is = 0;
        let mut m = 1u8;
        for n in 0..2 {
            let q = &b[BlockQ3_K::OFF_QS + 32 * n..BlockQ3_K::OFF_QS + 32 * n + 32];
            for shift in [0, 2, 4, 6] {
                for half in 0..2 {
                    let dl = d_all * scales[is] as f32;
                    is += 1;
                    for l in 0..16 {
                        let lo = ((q[l + 16 * half] >> shift) & 3) as i32;
                        let hi = if hm[l + 16 * half] & m != 0 { 0 } else { 4 };
                        y[out] = dl * (lo - hi) as f32;
                        out += 1;
                    }
                }
                m <<= 1;
            }
        }
    }
}

pub(crate) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ4_K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockQ4_K::OFF_D);
        let min = read_f16(b, BlockQ4_K::OFF_DMIN);
        let scales = scales12(b, BlockQ4_K::OFF_SCALES);
        for c in 0..4 {
            let q = &b[BlockQ4_K::OFF_QS + 32 * c..BlockQ4_K::OFF_QS + 32 * c + 32];
            let (sc, m) = get_scale_min_k4(2 * c, &scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * c + 1, &scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            let yc = &mut y[64 * c..64 * c + 64];
            for l in 0..32 {
                yc[l] = d1 * (q[l] & 0xF) as f32 - m1;
                yc[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

pub(crate) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ5_K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockQ5_K::OFF_D);
        let min = read_f16(b, BlockQ5_K::OFF_DMIN);
        let scales = scales12(b, BlockQ5_K::OFF_SCALES);
        let qh = &b[BlockQ5_K::OFF_QH..BlockQ5_K::OFF_QH + 32];
        for c in 0..4 {
            let ql = &b[BlockQ5_K::OFF_QS + 32 * c..BlockQ5_K::OFF_QS + 32 * c + 32];
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let (sc, m) = get_scale_min_k4(2 * c, &scales);
            let (d1, m1) = (d * sc as f32, min * m as f32);
            let (sc, m) = get_scale_min_k4(2 * c + 1, &scales);
            let (d2, m2) = (d * sc as f32, min * m as f32);
            let yc = &mut y[64 * c..64 * c + 64];
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                yc[l] = d1 * ((ql[l] & 0xF) as i32 + h1) as f32 - m1;
                yc[l + 32] = d2 * ((ql[l] >> 4) as i32 + h2) as f32 - m2;
            }
        }
    }
}

pub(crate) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ6_K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockQ6_K::OFF_D);
        for n in 0..2 {
            let ql = &b[BlockQ6_K::OFF_QL + 64 * n..BlockQ6_K::OFF_QL + 64 * n + 64];
            let qh = &b[BlockQ6_K::OFF_QH + 32 * n..BlockQ6_K::OFF_QH + 32 * n + 32];
            let sc = |i: usize| b[BlockQ6_K::OFF_SCALES + 8 * n + i] as i8 as f32;
            let yc = &mut y[128 * n..128 * n + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                yc[l] = d * sc(is) * q1 as f32;
                yc[l + 32] = d * sc(is + 2) * q2 as f32;
                yc[l + 64] = d * sc(is + 4) * q3 as f32;
                yc[l + 96] = d * sc(is + 6) * q4 as f32;
            }
        }
    }
}

pub(crate) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ8_K::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (yj, &q) in y.iter_mut().zip(&b[BlockQ8_K::OFF_QS..BlockQ8_K::OFF_QS + QK_K]) {
            *yj = d * (q as i8) as f32;
        }
    }
}

/// ggml's `nearest_int`: round to nearest, ties to even, through the 1.5·2^23 magic constant
/// (valid for |x| < 2^22, which every caller guarantees).
#[inline]
pub(crate) fn nearest_int(fval: f32) -> i32 {
    let val = fval + 12_582_912.0;
    (val.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// Quantize one 256-element group to Q8_K (`quantize_row_q8_K_ref`).
fn q8_k_block(x: &[f32]) -> BlockQ8_K {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    let mut y = BlockQ8_K { d: 0.0, qs: [0; QK_K], bsums: [0; QK_K / 16] };
    if amax == 0.0 {
        return y;
    }
    let iscale = -127.0 / max;
    for (q, &v) in y.qs.iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (j, s) in y.bsums.iter_mut().enumerate() {
        *s = y.qs[16 * j..16 * j + 16].iter().map(|&q| q as i16).sum();
    }
    y.d = 1.0 / iscale;
    y
}

/// Quantize activations to Q8_K blocks, bit-exact with llama.cpp's `quantize_row_q8_K_ref`
/// (an all-zero group gets `d = 0`, zero quants and zero sums). Processes
/// `min(src.len() / 256, dst.len())` blocks.
pub fn quantize_row_q8_k(src: &[f32], dst: &mut [BlockQ8_K]) {
    for (x, y) in src.chunks_exact(QK_K).zip(dst.iter_mut()) {
        *y = q8_k_block(x);
    }
}

pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockQ8_K::SIZE)) {
        b.copy_from_slice(bytemuck::bytes_of(&q8_k_block(x)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-2.6), -3);
        assert_eq!(nearest_int(3.49), 3);
    }

    #[test]
    fn q3_k_scales_unpack() {
        // Scale j: low nibble in byte j%8 (j<8: low, else high), high pair in byte 8 + j%4.
        let mut s = [0u8; 12];
        let raw: [u8; 16] = core::array::from_fn(|j| (j as u8 * 4 + 1) & 63);
        for (j, &l) in raw.iter().enumerate() {
            if j < 8 {
                s[j] |= l & 0xF;
            } else {
                s[j - 8] |= (l & 0xF) << 4;
            }
            s[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
        }
        let got = unpack_q3_k_scales(&s);
        for j in 0..16 {
            assert_eq!(got[j] as i32, raw[j] as i32 - 32);
        }
    }
}
