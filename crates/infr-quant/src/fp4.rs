//! FP4 (E2M1) formats: MXFP4 (32 values, E8M0 exponent) and NVFP4 (64 values, UE4M3 scale per
//! 16), plus the scale conversions from llama.cpp's `ggml/src/ggml-impl.h`.
//!
//! Dequantizers and quantizers mirror `dequantize_row_mxfp4` / `dequantize_row_nvfp4` and
//! `quantize_row_mxfp4_ref` / `quantize_row_nvfp4_ref` in `ggml/src/ggml-quants.c`.

use crate::blocks::{BlockMXFP4, BlockNVFP4};

/// E2M1 code → value doubled (`kvalues_mxfp4` / `kvalues_fp4` in `ggml-common.h`): the scale
/// helpers return half the real scale so that products stay exact integers times a power of 2.
pub static KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// E8M0 exponent byte → `2^(x-127)` (`ggml_e8m0_to_fp32`; `x = 0` gives 2^-127, 0xFF is not
/// treated as NaN).
#[inline]
pub fn e8m0_to_f32(x: u8) -> f32 {
    f32::from_bits(if x == 0 { 0x0040_0000 } else { (x as u32) << 23 })
}

/// Half of [`e8m0_to_f32`] (`ggml_e8m0_to_fp32_half`), the factor MXFP4 applies to
/// [`KVALUES_MXFP4`].
#[inline]
pub fn e8m0_to_f32_half(x: u8) -> f32 {
    f32::from_bits(if x < 2 { 0x0020_0000 << x } else { ((x - 1) as u32) << 23 })
}

/// UE4M3 byte (unsigned, 4 exponent bits with bias 7, 3 mantissa bits) → half its value
/// (`ggml_ue4m3_to_fp32`, halved to match [`KVALUES_MXFP4`]); `0` and `0x7F` give 0.
#[inline]
pub fn ue4m3_to_f32(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 0x7) as f32;
    // Both branches are exact: a small integer or 1.m times a power of two.
    let raw = if exp == 0 { man * pow2(-9) } else { (1.0 + man / 8.0) * pow2(exp - 7) };
    raw * 0.5
}

/// `2^e` for `-126 <= e <= 127`, exactly.
#[inline]
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// f32 → UE4M3 byte as `ggml_fp32_to_ue4m3` rounds it (non-positive and NaN give 0, values
/// are clamped to 448, the mantissa is rounded half up, overflow saturates to `0x7E`).
pub fn f32_to_ue4m3(x: f32) -> u8 {
    #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN must take this branch, as in ggml.
    if !(x > 0.0) {
        return 0;
    }
    let x = if x > 448.0 { 448.0 } else { x };
    let bits = x.to_bits();
    let fp32_exp = ((bits >> 23) & 0xFF) as i32 - 127;
    let fp32_man = ((bits >> 20) & 0x7) as i32;
    let mut exp = fp32_exp + 7;
    if exp <= 0 {
        // Subnormal: value = man * 2^-9.
        let man = ((x * 512.0 + 0.5) as i32).min(7);
        return if man < 1 { 0 } else { man as u8 };
    }
    if exp >= 15 {
        return 0x7E;
    }
    let mut man = fp32_man + ((bits >> 19) & 1) as i32;
    if man > 7 {
        man = 0;
        exp += 1;
        if exp >= 15 {
            return 0x7E;
        }
    }
    ((exp << 3) | man) as u8
}

pub(crate) fn dequantize_mxfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockMXFP4::SIZE).zip(dst.chunks_exact_mut(32)) {
        let d = e8m0_to_f32_half(b[BlockMXFP4::OFF_E]);
        let qs = &b[BlockMXFP4::OFF_QS..];
        for j in 0..16 {
            y[j] = KVALUES_MXFP4[(qs[j] & 0x0F) as usize] as f32 * d;
            y[j + 16] = KVALUES_MXFP4[(qs[j] >> 4) as usize] as f32 * d;
        }
    }
}

pub(crate) fn dequantize_nvfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BlockNVFP4::SIZE).zip(dst.chunks_exact_mut(64)) {
        for s in 0..4 {
            let d = ue4m3_to_f32(b[BlockNVFP4::OFF_D + s]);
            let qs = &b[BlockNVFP4::OFF_QS + 8 * s..BlockNVFP4::OFF_QS + 8 * s + 8];
            let yb = &mut y[16 * s..16 * s + 16];
            for j in 0..8 {
                yb[j] = KVALUES_MXFP4[(qs[j] & 0x0F) as usize] as f32 * d;
                yb[j + 8] = KVALUES_MXFP4[(qs[j] >> 4) as usize] as f32 * d;
            }
        }
    }
}

/// Index of the E2M1 code whose value times `e` is closest to `x` (first wins on ties).
fn best_index_mxfp4(x: f32, e: f32) -> u8 {
    let mut best = 0;
    let mut best_err = (KVALUES_MXFP4[0] as f32 * e - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (k as f32 * e - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

pub(crate) fn quantize_mxfp4(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(BlockMXFP4::SIZE)) {
        let mut amax = 0.0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        // ggml: (uint8_t)(floorf(log2f(amax)) - 2 + 127); the float→u8 cast truncates.
        let e = if amax > 0.0 { (amax.log2().floor() - 2.0 + 127.0) as i32 as u8 } else { 0 };
        let d = e8m0_to_f32_half(e);
        b[BlockMXFP4::OFF_E] = e;
        for j in 0..16 {
            let x0 = best_index_mxfp4(x[j], d);
            let x1 = best_index_mxfp4(x[j + 16], d);
            b[BlockMXFP4::OFF_QS + j] = x0 | (x1 << 4);
        }
    }
}

pub(crate) fn quantize_nvfp4(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(64).zip(dst.chunks_exact_mut(BlockNVFP4::SIZE)) {
        for s in 0..4 {
            let xb = &x[16 * s..16 * s + 16];
            let mut amax = 0.0f32;
            for &v in xb {
                if amax < v.abs() {
                    amax = v.abs();
                }
            }
            let ue = f32_to_ue4m3(amax / 6.0);
            b[BlockNVFP4::OFF_D + s] = ue;
            let d = ue4m3_to_f32(ue);
            for j in 0..8 {
                let x0 = best_index_mxfp4(xb[j], d);
                let x1 = best_index_mxfp4(xb[j + 8], d);
                b[BlockNVFP4::OFF_QS + 8 * s + j] = x0 | (x1 << 4);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_helpers() {
        assert_eq!(e8m0_to_f32(127), 1.0);
        assert_eq!(e8m0_to_f32(0), 2f32.powi(-127));
        for x in 0..=254u8 {
            assert_eq!(e8m0_to_f32_half(x), e8m0_to_f32(x) / 2.0, "x={x}");
        }
        assert_eq!(ue4m3_to_f32(0x38), 0.5); // exp 7, man 0 → 1.0, halved
        assert_eq!(ue4m3_to_f32(0x01), 2f32.powi(-10));
        // Exponent 15 decodes but ggml's encoder saturates it to 0x7E.
        for x in 1..0x78u8 {
            assert_eq!(f32_to_ue4m3(ue4m3_to_f32(x) * 2.0), x, "x={x:#x}");
        }
        assert_eq!(f32_to_ue4m3(256.0), 0x7E);
        assert_eq!(f32_to_ue4m3(1e9), 0x7E);
        assert_eq!(f32_to_ue4m3(-1.0), 0);
        assert_eq!(f32_to_ue4m3(f32::NAN), 0);
    }
}
