//! Half-precision conversions exactly as llama.cpp performs them.
//!
//! ggml converts f16 with the bit tricks of Maratyszcza/FP16 (`ggml_compute_fp16_to_fp32` and
//! `ggml_compute_fp32_to_fp16` in `ggml/src/ggml-impl.h`) and bf16 with round-to-nearest-even
//! plus quiet NaNs (`ggml_compute_fp32_to_bf16`). For finite values these agree with the IEEE
//! conversions in the `half` crate; the functions here also reproduce ggml's NaN handling
//! (f32→f16 turns every NaN into `0x7E00` with the sign kept), so quantizers that round their
//! scales through f16 produce llama.cpp's bytes bit for bit.

/// Convert IEEE half bits to f32, as `GGML_FP16_TO_FP32` does (exact for every non-NaN).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let w = (h as u32) << 16;
    let sign = w & 0x8000_0000;
    let two_w = w.wrapping_add(w);

    // 2^-112: rebias the exponent from 15 to 127.
    let exp_scale = f32::from_bits(0x0780_0000);
    let normalized = f32::from_bits((two_w >> 4) + (0xE0 << 23)) * exp_scale;

    // Subnormal halves: build 0.5 + m * 2^-24 and subtract 0.5.
    let denormalized = f32::from_bits((two_w >> 17) | (126 << 23)) - 0.5;

    let bits = if two_w < (1 << 27) { denormalized.to_bits() } else { normalized.to_bits() };
    f32::from_bits(sign | bits)
}

/// Convert f32 to IEEE half bits with round-to-nearest-even, as `GGML_FP32_TO_FP16` does
/// (overflow gives ±inf, every NaN gives a quiet `0x7E00` with the input's sign).
#[inline]
pub fn f32_to_f16(f: f32) -> u16 {
    let scale_to_inf = f32::from_bits(0x7780_0000); // 2^112
    let scale_to_zero = f32::from_bits(0x0880_0000); // 2^-110
    let mut base = (f.abs() * scale_to_inf) * scale_to_zero;

    let w = f.to_bits();
    let shl1_w = w.wrapping_add(w);
    let sign = w & 0x8000_0000;
    let mut bias = shl1_w & 0xFF00_0000;
    if bias < 0x7100_0000 {
        bias = 0x7100_0000;
    }

    base += f32::from_bits((bias >> 1) + 0x0780_0000);
    let bits = base.to_bits();
    let exp_bits = (bits >> 13) & 0x0000_7C00;
    let mantissa_bits = bits & 0x0000_0FFF;
    let nonsign = exp_bits + mantissa_bits;
    ((sign >> 16) | if shl1_w > 0xFF00_0000 { 0x7E00 } else { nonsign }) as u16
}

/// Convert bf16 bits to f32 (a plain shift, exact for every value including NaN payloads).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Convert f32 to bf16 bits with round-to-nearest-even; NaNs are truncated and forced quiet.
/// This is `ggml_compute_fp32_to_bf16` (the reference path; subnormals are kept).
#[inline]
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// C's `roundf` (half away from zero) as an integer, for |x| < 2^31: the same result
/// without a library call (Rust's `f32::round` is one on baseline x86-64), so the loops of
/// the activation quantizers vectorize. `x - trunc(x)` is exact for every f32.
#[inline(always)]
pub(crate) fn round_away(x: f32) -> i32 {
    let t = x as i32;
    let f = x - t as f32;
    t.saturating_add((f >= 0.5) as i32 - (f <= -0.5) as i32)
}

/// Read a little-endian half at `off` in `b` and convert it with [`f16_to_f32`].
#[inline]
pub(crate) fn read_f16(b: &[u8], off: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[off], b[off + 1]]))
}

/// Write `v` as a little-endian half (via [`f32_to_f16`]) at `off` in `b`.
#[inline]
pub(crate) fn write_f16(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_matches_ieee_for_all_non_nan() {
        for h in 0..=u16::MAX {
            let ours = f16_to_f32(h);
            let ieee = half::f16::from_bits(h).to_f32();
            if ieee.is_nan() {
                assert!(ours.is_nan());
                assert_eq!(ours.to_bits() & 0x8000_0000, ieee.to_bits() & 0x8000_0000);
            } else {
                assert_eq!(ours.to_bits(), ieee.to_bits(), "h={h:#06x}");
                // Round trip through our encoder.
                assert_eq!(f32_to_f16(ours), h, "h={h:#06x}");
            }
        }
    }

    /// `n` f32s of random bit patterns (xorshift32 from `seed`).
    fn random_f32s(seed: u32, n: usize) -> impl Iterator<Item = f32> {
        let mut x = seed;
        (0..n).map(move |_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f32::from_bits(x)
        })
    }

    /// `round_away` is `roundf` on every f32 of magnitude below 2^31 near the quantizers'
    /// range (all bit patterns of |x| < 256, ties included) and on random wider ones.
    #[test]
    fn round_away_is_roundf() {
        for bits in 0..0x4380_0000u32 {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                assert_eq!(round_away(x), x.round() as i32, "x={x:e}");
            }
        }
        for x in random_f32s(0x9e37_79b9, 200_000) {
            if x.is_finite() && x.abs() < 2.0e9 {
                assert_eq!(round_away(x), x.round() as i32, "x={x:e}");
            }
        }
    }

    #[test]
    fn f32_to_f16_rounding() {
        for f in random_f32s(0x1234_5678, 200_000) {
            if f.is_nan() {
                assert_eq!(f32_to_f16(f) & 0x7fff, 0x7E00);
                continue;
            }
            assert_eq!(f32_to_f16(f), half::f16::from_f32(f).to_bits(), "f={f:e}");
        }
    }

    #[test]
    fn bf16_round_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie to even
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82); // tie to even (up)
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0); // NaN forced quiet
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
    }
}
