//! Block layouts of every block-quantized ggml type, as `#[repr(C)]` structs.
//!
//! Each struct mirrors the `block_*` typedef of llama.cpp's `ggml/src/ggml-common.h` field for
//! field, so `size_of` equals the type's `type_size` (checked at compile time) and every field
//! sits at the byte offset ggml uses. The fast CPU kernels and the GPU repacking code use the
//! `OFF_*` constants (byte offsets inside one block) and can reinterpret aligned block slices
//! with `bytemuck`. All multi-byte fields are little-endian, as in GGUF files.
//!
//! `f16` fields are raw IEEE half bits; convert them with [`crate::float::f16_to_f32`] to get
//! llama.cpp's exact conversion.

use half::f16;

use crate::types::{GgmlType, QK_K};

/// Defines a block struct plus its `OFF_*` byte offsets, `TYPE` and `SIZE`, and asserts at
/// compile time that its size matches [`GgmlType::info`].
macro_rules! block {
    (
        $(#[$meta:meta])*
        $name:ident for $ty:ident {
            $( $(#[$fmeta:meta])* $field:ident : $fty:ty => $off:ident ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $fty, )*
        }

        impl $name {
            $(
                #[doc = concat!("Byte offset of `", stringify!($field), "` inside one block.")]
                pub const $off: usize = core::mem::offset_of!($name, $field);
            )*
            /// The ggml type this block belongs to.
            pub const TYPE: GgmlType = GgmlType::$ty;
            /// Bytes per block (`type_size` in ggml).
            pub const SIZE: usize = core::mem::size_of::<$name>();
            /// Elements per block (`blck_size` in ggml).
            pub const ELEMS: usize = GgmlType::$ty.info().block_size;
        }

        const _: () = assert!(core::mem::size_of::<$name>() == GgmlType::$ty.info().type_size);
    };
}

block! {
    /// `block_q4_0`: 32 weights `x = d * (q - 8)`; element `j` is the low nibble of `qs[j]`,
    /// element `j + 16` the high nibble.
    BlockQ4_0 for Q4_0 {
        /// Scale.
        d: f16 => OFF_D,
        /// Packed 4-bit quants.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_q4_1`: 32 weights `x = d * q + m`, nibbles packed as in Q4_0.
    BlockQ4_1 for Q4_1 {
        /// Scale.
        d: f16 => OFF_D,
        /// Offset (minimum).
        m: f16 => OFF_M,
        /// Packed 4-bit quants.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_q5_0`: 32 weights `x = d * (q - 16)`; the fifth bit of element `j` is bit `j`
    /// of the little-endian u32 `qh`.
    BlockQ5_0 for Q5_0 {
        /// Scale.
        d: f16 => OFF_D,
        /// High bits (u32, little-endian).
        qh: [u8; 4] => OFF_QH,
        /// Low nibbles, packed as in Q4_0.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_q5_1`: 32 weights `x = d * q + m`, bits laid out as in Q5_0.
    BlockQ5_1 for Q5_1 {
        /// Scale.
        d: f16 => OFF_D,
        /// Offset (minimum).
        m: f16 => OFF_M,
        /// High bits (u32, little-endian).
        qh: [u8; 4] => OFF_QH,
        /// Low nibbles.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_q8_0`: 32 weights `x = d * q`. Also the activation format for Q4_0/Q5_0/Q8_0
    /// integer dot products.
    BlockQ8_0 for Q8_0 {
        /// Scale.
        d: f16 => OFF_D,
        /// Signed 8-bit quants.
        qs: [i8; 32] => OFF_QS,
    }
}

block! {
    /// `block_q8_1`: 32 activations `x = d * q` plus `s = d * sum(q)`, used by the integer dot
    /// products against the offset formats (Q4_1, Q5_1).
    BlockQ8_1 for Q8_1 {
        /// Scale.
        d: f16 => OFF_D,
        /// `d * sum(qs)`, rounded to f16.
        s: f16 => OFF_S,
        /// Signed 8-bit quants.
        qs: [i8; 32] => OFF_QS,
    }
}

block! {
    /// `block_q2_K`: 256 weights in 16 groups of 16, `x = d * sc * q - dmin * m` with 4-bit
    /// `sc` (low nibble of `scales[g]`) and `m` (high nibble).
    BlockQ2_K for Q2_K {
        /// Per-group 4-bit scale (low nibble) and min (high nibble).
        scales: [u8; QK_K / 16] => OFF_SCALES,
        /// 2-bit quants: byte `l` of each 32-byte chunk holds four groups at shifts 0,2,4,6.
        qs: [u8; QK_K / 4] => OFF_QS,
        /// Super-block scale of the scales.
        d: f16 => OFF_D,
        /// Super-block scale of the mins.
        dmin: f16 => OFF_DMIN,
    }
}

block! {
    /// `block_q3_K`: 256 weights in 16 groups of 16, `x = d * (sc - 32) * (q - 4*!hbit)`,
    /// 6-bit scales packed into 12 bytes (see [`crate::kquants::unpack_q3_k_scales`]).
    BlockQ3_K for Q3_K {
        /// High bit of every quant: bit `k` of `hmask[l]` belongs to element `32*k + l`.
        hmask: [u8; QK_K / 8] => OFF_HMASK,
        /// Low 2 bits of the quants, laid out as in Q2_K.
        qs: [u8; QK_K / 4] => OFF_QS,
        /// Packed 6-bit group scales.
        scales: [u8; 12] => OFF_SCALES,
        /// Super-block scale.
        d: f16 => OFF_D,
    }
}

block! {
    /// `block_q4_K`: 256 weights in 8 groups of 32, `x = d * sc * q - dmin * m` with 6-bit
    /// `sc`/`m` packed in 12 bytes (see [`crate::kquants::get_scale_min_k4`]).
    BlockQ4_K for Q4_K {
        /// Super-block scale of the scales.
        d: f16 => OFF_D,
        /// Super-block scale of the mins.
        dmin: f16 => OFF_DMIN,
        /// Packed 6-bit scales and mins.
        scales: [u8; 12] => OFF_SCALES,
        /// 4-bit quants: each 32-byte chunk holds groups `2c` (low nibbles) and `2c+1` (high).
        qs: [u8; QK_K / 2] => OFF_QS,
    }
}

block! {
    /// `block_q5_K`: as Q4_K with a fifth bit per quant in `qh`.
    BlockQ5_K for Q5_K {
        /// Super-block scale of the scales.
        d: f16 => OFF_D,
        /// Super-block scale of the mins.
        dmin: f16 => OFF_DMIN,
        /// Packed 6-bit scales and mins.
        scales: [u8; 12] => OFF_SCALES,
        /// Fifth bits: bit `g` of `qh[l]` belongs to element `32*g + l`.
        qh: [u8; QK_K / 8] => OFF_QH,
        /// Low nibbles, laid out as in Q4_K.
        qs: [u8; QK_K / 2] => OFF_QS,
    }
}

block! {
    /// `block_q6_K`: 256 weights in 16 groups of 16, `x = d * sc * (q - 32)`, 6-bit quants
    /// split into a low nibble (`ql`) and 2 high bits (`qh`).
    BlockQ6_K for Q6_K {
        /// Low 4 bits of the quants.
        ql: [u8; QK_K / 2] => OFF_QL,
        /// High 2 bits of the quants.
        qh: [u8; QK_K / 4] => OFF_QH,
        /// Signed 8-bit group scales.
        scales: [i8; QK_K / 16] => OFF_SCALES,
        /// Super-block scale.
        d: f16 => OFF_D,
    }
}

block! {
    /// `block_q8_K`: 256 activations `x = d * q` with per-16 sums, the activation format for
    /// the k-quant and i-quant integer dot products. Note the f32 (not f16) scale.
    BlockQ8_K for Q8_K {
        /// Scale (f32).
        d: f32 => OFF_D,
        /// Signed 8-bit quants.
        qs: [i8; QK_K] => OFF_QS,
        /// Sum of each group of 16 quants.
        bsums: [i16; QK_K / 16] => OFF_BSUMS,
    }
}

block! {
    /// `block_iq2_xxs`: 8 groups of 32; per group two u32: four 8-bit grid indices
    /// (`iq2xxs_grid`), then four 7-bit sign indices and a 4-bit scale in the top bits.
    BlockIQ2_XXS for IQ2_XXS {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// Grid indices, signs and scales.
        qs: [u16; QK_K / 8] => OFF_QS,
    }
}

block! {
    /// `block_iq2_xs`: each u16 holds a 9-bit `iq2xs_grid` index and a 7-bit sign index;
    /// two 4-bit scales per group of 32.
    BlockIQ2_XS for IQ2_XS {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// Grid and sign indices.
        qs: [u16; QK_K / 8] => OFF_QS,
        /// 4-bit scales, two per byte.
        scales: [u8; QK_K / 32] => OFF_SCALES,
    }
}

block! {
    /// `block_iq2_s`: 10-bit `iq2s_grid` indices (8 low bits in `qs`, 2 high bits in `qh`),
    /// explicit sign bytes after the indices in `qs`.
    BlockIQ2_S for IQ2_S {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// 32 low index bytes then 32 sign bytes.
        qs: [u8; QK_K / 4] => OFF_QS,
        /// High index bits, 2 per group of 8.
        qh: [u8; QK_K / 32] => OFF_QH,
        /// 4-bit scales, two per byte.
        scales: [u8; QK_K / 32] => OFF_SCALES,
    }
}

block! {
    /// `block_iq3_xxs`: 64 `iq3xxs_grid` indices, then per group of 32 a u32 with four 7-bit
    /// sign indices and a 4-bit scale.
    BlockIQ3_XXS for IQ3_XXS {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// Grid indices then scales and signs.
        qs: [u8; 3 * QK_K / 8] => OFF_QS,
    }
}

block! {
    /// `block_iq3_s`: 9-bit `iq3s_grid` indices, explicit signs, 4-bit odd scales.
    BlockIQ3_S for IQ3_S {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// Low 8 index bits.
        qs: [u8; QK_K / 4] => OFF_QS,
        /// Ninth index bits.
        qh: [u8; QK_K / 32] => OFF_QH,
        /// Sign bits, one per weight.
        signs: [u8; QK_K / 8] => OFF_SIGNS,
        /// 4-bit scales, two per byte.
        scales: [u8; QK_K / 64] => OFF_SCALES,
    }
}

block! {
    /// `block_iq1_s`: 11-bit `iq1s_grid` indices; each `qh` holds 4x3 high index bits, a
    /// 3-bit scale and the sign of the shift `IQ1S_DELTA`.
    BlockIQ1_S for IQ1_S {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// Low 8 index bits.
        qs: [u8; QK_K / 8] => OFF_QS,
        /// High index bits, scale and delta sign per group of 32.
        qh: [u16; QK_K / 32] => OFF_QH,
    }
}

block! {
    /// `block_iq1_m`: like IQ1_S with a delta sign per group of 8 and 3-bit scales per 16;
    /// the f16 super-block scale is scattered over the top nibbles of the four u16 `scales`.
    BlockIQ1_M for IQ1_M {
        /// Low 8 index bits.
        qs: [u8; QK_K / 8] => OFF_QS,
        /// High 3 index bits + delta sign, per group of 8 (a nibble each).
        qh: [u8; QK_K / 16] => OFF_QH,
        /// 3-bit scales and the scattered f16 scale (read as four little-endian u16).
        scales: [u8; QK_K / 32] => OFF_SCALES,
    }
}

block! {
    /// `block_iq4_nl`: 32 weights `x = d * kvalues_iq4nl[q]`, nibbles packed as in Q4_0.
    BlockIQ4_NL for IQ4_NL {
        /// Scale.
        d: f16 => OFF_D,
        /// Packed 4-bit indices into `kvalues_iq4nl`.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_iq4_xs`: 8 groups of 32 with 6-bit scales (`ls - 32`), values from
    /// `kvalues_iq4nl`.
    BlockIQ4_XS for IQ4_XS {
        /// Super-block scale.
        d: f16 => OFF_D,
        /// High 2 bits of the 8 group scales.
        scales_h: u16 => OFF_SCALES_H,
        /// Low 4 bits of the group scales, two per byte.
        scales_l: [u8; QK_K / 64] => OFF_SCALES_L,
        /// Packed 4-bit indices, 16 bytes per group as in IQ4_NL.
        qs: [u8; QK_K / 2] => OFF_QS,
    }
}

block! {
    /// `block_tq1_0`: ternary weights {-1,0,1}*d, five trits per byte in `qs` (base-3 fixed
    /// point), four per byte in `qh`.
    BlockTQ1_0 for TQ1_0 {
        /// 5 trits per byte.
        qs: [u8; (QK_K - 4 * QK_K / 64) / 5] => OFF_QS,
        /// 4 trits per byte.
        qh: [u8; QK_K / 64] => OFF_QH,
        /// Scale.
        d: f16 => OFF_D,
    }
}

block! {
    /// `block_tq2_0`: ternary weights stored as 2-bit `q - 1`.
    BlockTQ2_0 for TQ2_0 {
        /// 2-bit quants, four per byte.
        qs: [u8; QK_K / 4] => OFF_QS,
        /// Scale.
        d: f16 => OFF_D,
    }
}

block! {
    /// `block_mxfp4`: 32 E2M1 values with a shared E8M0 exponent.
    BlockMXFP4 for MXFP4 {
        /// E8M0 scale exponent.
        e: u8 => OFF_E,
        /// Packed 4-bit E2M1 codes, nibbles as in Q4_0.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_nvfp4`: 64 E2M1 values in 4 sub-blocks of 16, each with a UE4M3 scale.
    BlockNVFP4 for NVFP4 {
        /// UE4M3 scale per sub-block of 16.
        d: [u8; 4] => OFF_D,
        /// Packed E2M1 codes, 8 bytes per sub-block (nibbles as in Q4_0 within it).
        qs: [u8; 32] => OFF_QS,
    }
}

block! {
    /// `block_q1_0`: 128 weights `x = ±d`, one sign bit each (bit set: `+d`).
    BlockQ1_0 for Q1_0 {
        /// Scale.
        d: f16 => OFF_D,
        /// Sign bits, element `j` is bit `j % 8` of byte `j / 8`.
        qs: [u8; 16] => OFF_QS,
    }
}

block! {
    /// `block_q2_0`: 64 weights `x = d * (q - 1)` with 2-bit `q`.
    BlockQ2_0 for Q2_0 {
        /// Scale.
        d: f16 => OFF_D,
        /// 2-bit quants, element `j` at bits `2*(j%4)` of byte `j / 4`.
        qs: [u8; 16] => OFF_QS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_match_ggml() {
        assert_eq!(BlockQ2_K::OFF_D, 80);
        assert_eq!(BlockQ3_K::OFF_SCALES, 96);
        assert_eq!(BlockQ3_K::OFF_D, 108);
        assert_eq!(BlockQ4_K::OFF_QS, 16);
        assert_eq!(BlockQ5_K::OFF_QS, 48);
        assert_eq!(BlockQ6_K::OFF_D, 208);
        assert_eq!(BlockQ8_K::OFF_BSUMS, 260);
        assert_eq!(BlockIQ1_S::OFF_QH, 34);
        assert_eq!(BlockIQ4_XS::OFF_QS, 8);
        assert_eq!(BlockTQ1_0::OFF_D, 52);
        assert_eq!(BlockQ8_0::ELEMS, 32);
    }
}
