//! Very low-bit formats: the ternary TQ1_0 / TQ2_0 (BitNet-style {-1, 0, 1} · d) and the
//! binary/2-bit Q1_0 / Q2_0.
//!
//! Mirrors `dequantize_row_{tq1_0,tq2_0,q1_0,q2_0}` and the matching `quantize_row_*_ref` in
//! llama.cpp's `ggml/src/ggml-quants.c`.

use crate::blocks::{BlockQ1_0, BlockQ2_0, BlockTQ1_0, BlockTQ2_0};
use crate::float::{read_f16, write_f16};
use crate::legacy::{absmax, inv_or_zero};
use crate::types::QK_K;

/// Powers of three used to shift the next trit of a TQ1_0 byte into the top position.
const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];

/// The trit (0, 1 or 2) in the top position of a base-3 fixed-point byte after multiplying by
/// `3^n` (wrapping, as ggml's `uint8_t` arithmetic does).
#[inline]
pub fn tq1_trit(q: u8, n: usize) -> i32 {
    let q = q.wrapping_mul(POW3[n]);
    ((q as u16 * 3) >> 8) as i32
}

pub(crate) fn dequantize_tq1_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockTQ1_0::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockTQ1_0::OFF_D);
        let qs = &b[BlockTQ1_0::OFF_QS..BlockTQ1_0::OFF_QS + 48];
        let qh = &b[BlockTQ1_0::OFF_QH..BlockTQ1_0::OFF_QH + 4];
        let mut out = 0;
        // 32 bytes × 5 trits, then 16 bytes × 5 trits, then 4 bytes × 4 trits.
        for (start, len) in [(0usize, 32usize), (32, 16)] {
            for n in 0..5 {
                for &q in &qs[start..start + len] {
                    y[out] = (tq1_trit(q, n) - 1) as f32 * d;
                    out += 1;
                }
            }
        }
        for n in 0..4 {
            for &q in qh {
                y[out] = (tq1_trit(q, n) - 1) as f32 * d;
                out += 1;
            }
        }
    }
}

pub(crate) fn dequantize_tq2_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockTQ2_0::SIZE).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, BlockTQ2_0::OFF_D);
        let mut out = 0;
        for j in (0..64).step_by(32) {
            for l in 0..4 {
                for m in 0..32 {
                    let q = ((b[BlockTQ2_0::OFF_QS + j + m] >> (2 * l)) & 3) as i32;
                    y[out] = (q - 1) as f32 * d;
                    out += 1;
                }
            }
        }
    }
}

pub(crate) fn dequantize_q1_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ1_0::SIZE).zip(dst.chunks_exact_mut(128)) {
        let d = read_f16(b, BlockQ1_0::OFF_D);
        for (j, yj) in y.iter_mut().enumerate() {
            let bit = (b[BlockQ1_0::OFF_QS + j / 8] >> (j % 8)) & 1;
            *yj = if bit != 0 { d } else { -d };
        }
    }
}

pub(crate) fn dequantize_q2_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ2_0::SIZE).zip(dst.chunks_exact_mut(64)) {
        let d = read_f16(b, BlockQ2_0::OFF_D);
        for (j, yj) in y.iter_mut().enumerate() {
            let q = ((b[BlockQ2_0::OFF_QS + j / 4] >> (2 * (j % 4))) & 3) as i32;
            *yj = (q - 1) as f32 * d;
        }
    }
}

/// `lroundf(v * id) + 1`: the trit 0/1/2 of a value scaled to [-1, 1].
#[inline]
fn trit(v: f32, id: f32) -> u8 {
    ((v * id).round() as i32 + 1) as u8
}

/// Pack trits as a base-3 fixed-point byte (`ceil(q * 256 / 243)`).
#[inline]
fn pack_trits(q: u8) -> u8 {
    (q as u16 * 256).div_ceil(243) as u8
}

pub(crate) fn quantize_tq1_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockTQ1_0::SIZE)) {
        let d = absmax(x);
        let id = inv_or_zero(d);
        write_f16(b, BlockTQ1_0::OFF_D, d);
        // (byte offset in qs, bytes, first element)
        for (start, len, x0) in [(0usize, 32usize, 0usize), (32, 16, 160)] {
            for m in 0..len {
                let mut q = 0u8;
                for n in 0..5 {
                    q = q.wrapping_mul(3).wrapping_add(trit(x[x0 + m + n * len], id));
                }
                b[BlockTQ1_0::OFF_QS + start + m] = pack_trits(q);
            }
        }
        for j in 0..4 {
            let mut q = 0u8;
            for m in 0..4 {
                q = q.wrapping_mul(3).wrapping_add(trit(x[240 + j + m * 4], id));
            }
            b[BlockTQ1_0::OFF_QH + j] = pack_trits(q.wrapping_mul(3));
        }
    }
}

pub(crate) fn quantize_tq2_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(BlockTQ2_0::SIZE)) {
        let d = absmax(x);
        let id = inv_or_zero(d);
        write_f16(b, BlockTQ2_0::OFF_D, d);
        for j in (0..64).step_by(32) {
            for m in 0..32 {
                let mut q = 0u8;
                for n in 0..4 {
                    q = q.wrapping_add((trit(x[4 * j + m + n * 32], id) & 3) << (2 * n));
                }
                b[BlockTQ2_0::OFF_QS + j + m] = q;
            }
        }
    }
}

pub(crate) fn quantize_q1_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(128).zip(dst.chunks_exact_mut(BlockQ1_0::SIZE)) {
        let mut sum_abs = 0.0f32;
        for &v in x {
            sum_abs += v.abs();
        }
        write_f16(b, BlockQ1_0::OFF_D, sum_abs / 128.0);
        let qs = &mut b[BlockQ1_0::OFF_QS..BlockQ1_0::OFF_QS + 16];
        qs.fill(0);
        for (j, &v) in x.iter().enumerate() {
            if v >= 0.0 {
                qs[j / 8] |= 1 << (j % 8);
            }
        }
    }
}

pub(crate) fn quantize_q2_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(64).zip(dst.chunks_exact_mut(BlockQ2_0::SIZE)) {
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
            }
        }
        let d = amax;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        write_f16(b, BlockQ2_0::OFF_D, d);
        let qs = &mut b[BlockQ2_0::OFF_QS..BlockQ2_0::OFF_QS + 16];
        qs.fill(0);
        for (j, &w) in x.iter().enumerate() {
            let q = ((w * id).round() as i32 + 1).clamp(0, 3) as u8;
            qs[j / 4] |= q << (2 * (j % 4));
        }
    }
}
