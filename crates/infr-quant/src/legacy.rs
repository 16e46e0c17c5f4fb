//! The original 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//!
//! Dequantizers mirror `dequantize_row_q*` and quantizers `quantize_row_q*_ref` in llama.cpp's
//! `ggml/src/ggml-quants.c`, with the same float operation order so results are bit-exact.
//! Callers (the dispatch in `lib.rs`) have already checked that `src`/`dst` hold whole blocks.

use crate::blocks::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8_0, BlockQ8_1};
use crate::float::{read_f16, write_f16};

/// Elements per block of every format in this module.
pub const QK: usize = 32;

pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ4_0::SIZE).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, BlockQ4_0::OFF_D);
        let qs = &b[BlockQ4_0::OFF_QS..];
        for j in 0..QK / 2 {
            let x0 = (qs[j] & 0x0F) as i32 - 8;
            let x1 = (qs[j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ4_1::SIZE).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, BlockQ4_1::OFF_D);
        let m = read_f16(b, BlockQ4_1::OFF_M);
        let qs = &b[BlockQ4_1::OFF_QS..];
        for j in 0..QK / 2 {
            y[j] = (qs[j] & 0x0F) as f32 * d + m;
            y[j + QK / 2] = (qs[j] >> 4) as f32 * d + m;
        }
    }
}

/// Read the little-endian u32 of fifth bits at `off`.
fn read_qh(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ5_0::SIZE).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, BlockQ5_0::OFF_D);
        let qh = read_qh(b, BlockQ5_0::OFF_QH);
        let qs = &b[BlockQ5_0::OFF_QS..];
        for j in 0..QK / 2 {
            let xh0 = ((qh >> j) << 4) & 0x10;
            let xh1 = (qh >> (j + 12)) & 0x10;
            let x0 = (((qs[j] & 0x0F) as u32) | xh0) as i32 - 16;
            let x1 = (((qs[j] >> 4) as u32) | xh1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ5_1::SIZE).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, BlockQ5_1::OFF_D);
        let m = read_f16(b, BlockQ5_1::OFF_M);
        let qh = read_qh(b, BlockQ5_1::OFF_QH);
        let qs = &b[BlockQ5_1::OFF_QS..];
        for j in 0..QK / 2 {
            let xh0 = ((qh >> j) << 4) & 0x10;
            let xh1 = (qh >> (j + 12)) & 0x10;
            let x0 = ((qs[j] & 0x0F) as u32) | xh0;
            let x1 = ((qs[j] >> 4) as u32) | xh1;
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }
}

pub(crate) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ8_0::SIZE).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, BlockQ8_0::OFF_D);
        for (yj, &q) in y.iter_mut().zip(&b[BlockQ8_0::OFF_QS..]) {
            *yj = (q as i8) as f32 * d;
        }
    }
}

/// Q8_1 has no `to_float` in llama.cpp; this is the obvious `d * q` (the `s` field is ignored).
pub(crate) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockQ8_1::SIZE).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, BlockQ8_1::OFF_D);
        for (yj, &q) in y.iter_mut().zip(&b[BlockQ8_1::OFF_QS..]) {
            *yj = (q as i8) as f32 * d;
        }
    }
}

/// The value with the largest magnitude (the first one on ties), and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// Largest magnitude, as `MAX(amax, fabsf(v))` accumulates it.
pub(crate) fn absmax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |a, &v| if a > v.abs() { a } else { v.abs() })
}

/// `1/d`, or 0 for a zero scale (ggml's `d ? 1.0f/d : 0.0f`).
#[inline]
pub(crate) fn inv_or_zero(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

/// Minimum and maximum as ggml's offset quantizers find them (starting from ±FLT_MAX).
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BlockQ4_0::SIZE)) {
        let (_, max) = signed_absmax(x);
        let d = max / -8.0;
        let id = inv_or_zero(d);
        write_f16(b, BlockQ4_0::OFF_D, d);
        for j in 0..QK / 2 {
            let xi0 = ((x[j] * id + 8.5) as i32 as i8).min(15) as u8;
            let xi1 = ((x[j + QK / 2] * id + 8.5) as i32 as i8).min(15) as u8;
            b[BlockQ4_0::OFF_QS + j] = xi0 | (xi1 << 4);
        }
    }
}

pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BlockQ4_1::SIZE)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inv_or_zero(d);
        write_f16(b, BlockQ4_1::OFF_D, d);
        write_f16(b, BlockQ4_1::OFF_M, min);
        for j in 0..QK / 2 {
            let xi0 = (((x[j] - min) * id + 0.5) as i32 as i8).min(15) as u8;
            let xi1 = (((x[j + QK / 2] - min) * id + 0.5) as i32 as i8).min(15) as u8;
            b[BlockQ4_1::OFF_QS + j] = xi0 | (xi1 << 4);
        }
    }
}

pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BlockQ5_0::SIZE)) {
        let (_, max) = signed_absmax(x);
        let d = max / -16.0;
        let id = inv_or_zero(d);
        write_f16(b, BlockQ5_0::OFF_D, d);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let xi0 = ((x[j] * id + 16.5) as i32 as i8).min(31) as u8;
            let xi1 = ((x[j + QK / 2] * id + 16.5) as i32 as i8).min(31) as u8;
            b[BlockQ5_0::OFF_QS + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        b[BlockQ5_0::OFF_QH..BlockQ5_0::OFF_QH + 4].copy_from_slice(&qh.to_le_bytes());
    }
}

pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BlockQ5_1::SIZE)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inv_or_zero(d);
        write_f16(b, BlockQ5_1::OFF_D, d);
        write_f16(b, BlockQ5_1::OFF_M, min);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let xi0 = ((x[j] - min) * id + 0.5) as i32 as u8;
            let xi1 = ((x[j + QK / 2] - min) * id + 0.5) as i32 as u8;
            b[BlockQ5_1::OFF_QS + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= (((xi0 & 0x10) >> 4) as u32) << j;
            qh |= (((xi1 & 0x10) >> 4) as u32) << (j + QK / 2);
        }
        b[BlockQ5_1::OFF_QH..BlockQ5_1::OFF_QH + 4].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Quantize one 32-element group to Q8_0 (`quantize_row_q8_0_ref`).
fn q8_0_block(x: &[f32]) -> BlockQ8_0 {
    let amax = absmax(x);
    let d = amax / 127.0;
    let id = inv_or_zero(d);
    let mut qs = [0i8; QK];
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = crate::float::round_away(v * id) as i8;
    }
    BlockQ8_0 { d: half::f16::from_bits(crate::float::f32_to_f16(d)), qs }
}

/// Quantize one 32-element group to Q8_1 (`quantize_row_q8_1_ref`).
fn q8_1_block(x: &[f32]) -> BlockQ8_1 {
    let amax = absmax(x);
    let d = amax / 127.0;
    let id = inv_or_zero(d);
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = crate::float::round_away(v * id) as i8;
        sum += *q as i32;
    }
    let f16 = |v: f32| half::f16::from_bits(crate::float::f32_to_f16(v));
    BlockQ8_1 { d: f16(d), s: f16(sum as f32 * d), qs }
}

/// Quantize activations to Q8_0 blocks, bit-exact with llama.cpp's `quantize_row_q8_0_ref`.
/// Processes `min(src.len() / 32, dst.len())` blocks; a trailing partial block is ignored.
pub fn quantize_row_q8_0(src: &[f32], dst: &mut [BlockQ8_0]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.iter_mut()) {
        *y = q8_0_block(x);
    }
}

/// Quantize activations to Q8_1 blocks, bit-exact with llama.cpp's `quantize_row_q8_1_ref`.
/// Processes `min(src.len() / 32, dst.len())` blocks; a trailing partial block is ignored.
pub fn quantize_row_q8_1(src: &[f32], dst: &mut [BlockQ8_1]) {
    for (x, y) in src.chunks_exact(QK).zip(dst.iter_mut()) {
        *y = q8_1_block(x);
    }
}

pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BlockQ8_0::SIZE)) {
        b.copy_from_slice(bytemuck::bytes_of(&q8_0_block(x)));
    }
}

pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(BlockQ8_1::SIZE)) {
        b.copy_from_slice(bytemuck::bytes_of(&q8_1_block(x)));
    }
}
