//! The ggml type table: ids as written in GGUF files, block sizes and bytes per block.

use std::fmt;

/// A ggml tensor element type, numbered as in `enum ggml_type` (`ggml/include/ggml.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
#[repr(u32)]
pub enum GgmlType {
    /// 32-bit IEEE float.
    F32 = 0,
    /// 16-bit IEEE half.
    F16 = 1,
    /// 4-bit, 32 per block, one f16 scale.
    Q4_0 = 2,
    /// 4-bit, 32 per block, f16 scale and min.
    Q4_1 = 3,
    /// 5-bit, 32 per block, one f16 scale.
    Q5_0 = 6,
    /// 5-bit, 32 per block, f16 scale and min.
    Q5_1 = 7,
    /// 8-bit, 32 per block, one f16 scale.
    Q8_0 = 8,
    /// 8-bit, 32 per block, f16 scale and scaled sum (activations).
    Q8_1 = 9,
    /// 2-bit k-quant (256 per super-block, 4-bit scales and mins).
    Q2_K = 10,
    /// 3-bit k-quant (256 per super-block, 6-bit scales).
    Q3_K = 11,
    /// 4-bit k-quant (256 per super-block, 6-bit scales and mins).
    Q4_K = 12,
    /// 5-bit k-quant (256 per super-block, 6-bit scales and mins).
    Q5_K = 13,
    /// 6-bit k-quant (256 per super-block, 8-bit scales).
    Q6_K = 14,
    /// 8-bit, 256 per block, f32 scale and group sums (activations).
    Q8_K = 15,
    /// 2.06 bpw lattice i-quant.
    IQ2_XXS = 16,
    /// 2.31 bpw lattice i-quant.
    IQ2_XS = 17,
    /// 3.06 bpw lattice i-quant.
    IQ3_XXS = 18,
    /// 1.56 bpw i-quant.
    IQ1_S = 19,
    /// 4-bit non-linear, 32 per block.
    IQ4_NL = 20,
    /// 3.44 bpw lattice i-quant.
    IQ3_S = 21,
    /// 2.56 bpw lattice i-quant.
    IQ2_S = 22,
    /// 4.25 bpw non-linear, 256 per super-block.
    IQ4_XS = 23,
    /// 8-bit signed integer.
    I8 = 24,
    /// 16-bit signed integer.
    I16 = 25,
    /// 32-bit signed integer.
    I32 = 26,
    /// 64-bit signed integer.
    I64 = 27,
    /// 64-bit IEEE float.
    F64 = 28,
    /// 1.75 bpw i-quant.
    IQ1_M = 29,
    /// bfloat16.
    BF16 = 30,
    /// Ternary, 1.69 bpw (base-3 packed).
    TQ1_0 = 34,
    /// Ternary, 2.06 bpw (2-bit packed).
    TQ2_0 = 35,
    /// E2M1 with a shared E8M0 exponent per 32 (OCP microscaling).
    MXFP4 = 39,
    /// E2M1 with a UE4M3 scale per 16, 64 per block.
    NVFP4 = 40,
    /// 1-bit sign, 128 per block, one f16 scale.
    Q1_0 = 41,
    /// 2-bit {-1, 0, 1, 2} * d, 64 per block.
    Q2_0 = 42,
}

/// Static facts about a type: how many elements one block holds and how many bytes it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TypeInfo {
    /// Name as llama.cpp prints it (`ggml_type_name`).
    pub name: &'static str,
    /// Elements per block.
    pub block_size: usize,
    /// Bytes per block.
    pub type_size: usize,
}

/// Super-block size of the k-quants and i-quants (`QK_K`).
pub const QK_K: usize = 256;

impl GgmlType {
    /// Every type, in id order.
    pub const ALL: [GgmlType; 35] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::Q8_K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::I8,
        Self::I16,
        Self::I32,
        Self::I64,
        Self::F64,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
        Self::NVFP4,
        Self::Q1_0,
        Self::Q2_0,
    ];

    /// The type with GGUF id `id`, if ggml still defines it.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| *t as u32 == id)
    }

    /// Parse a type name as llama.cpp prints it (case-insensitive): `q4_k`, `Q8_0`, `bf16`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|t| t.info().name.eq_ignore_ascii_case(name))
    }

    /// The GGUF id.
    pub const fn id(self) -> u32 {
        self as u32
    }

    /// Block size, bytes per block and name.
    pub const fn info(self) -> TypeInfo {
        use GgmlType::*;
        let (name, block_size, type_size) = match self {
            F32 => ("f32", 1, 4),
            F16 => ("f16", 1, 2),
            BF16 => ("bf16", 1, 2),
            F64 => ("f64", 1, 8),
            I8 => ("i8", 1, 1),
            I16 => ("i16", 1, 2),
            I32 => ("i32", 1, 4),
            I64 => ("i64", 1, 8),
            Q4_0 => ("q4_0", 32, 2 + 16),
            Q4_1 => ("q4_1", 32, 4 + 16),
            Q5_0 => ("q5_0", 32, 2 + 4 + 16),
            Q5_1 => ("q5_1", 32, 4 + 4 + 16),
            Q8_0 => ("q8_0", 32, 2 + 32),
            Q8_1 => ("q8_1", 32, 4 + 32),
            Q2_K => ("q2_K", QK_K, QK_K / 16 + QK_K / 4 + 4),
            Q3_K => ("q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2),
            Q4_K => ("q4_K", QK_K, 4 + 12 + QK_K / 2),
            Q5_K => ("q5_K", QK_K, 4 + 12 + QK_K / 8 + QK_K / 2),
            Q6_K => ("q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2),
            Q8_K => ("q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2),
            IQ2_XXS => ("iq2_xxs", QK_K, 2 + QK_K / 8 * 2),
            IQ2_XS => ("iq2_xs", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32),
            IQ2_S => ("iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16),
            IQ3_XXS => ("iq3_xxs", QK_K, 2 + 3 * QK_K / 8),
            IQ3_S => ("iq3_s", QK_K, 2 + 13 * QK_K / 32 + QK_K / 64),
            IQ1_S => ("iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16),
            IQ1_M => ("iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32),
            IQ4_NL => ("iq4_nl", 32, 2 + 16),
            IQ4_XS => ("iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2),
            TQ1_0 => ("tq1_0", QK_K, 2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5),
            TQ2_0 => ("tq2_0", QK_K, 2 + QK_K / 4),
            MXFP4 => ("mxfp4", 32, 1 + 16),
            NVFP4 => ("nvfp4", 64, 4 + 32),
            Q1_0 => ("q1_0", 128, 2 + 16),
            Q2_0 => ("q2_0", 64, 2 + 16),
        };
        TypeInfo { name, block_size, type_size }
    }

    /// Bytes taken by a row of `n` elements, or `None` if `n` is not block aligned.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        let info = self.info();
        if n % info.block_size != 0 {
            return None;
        }
        (n / info.block_size).checked_mul(info.type_size)
    }

    /// True for block-quantized types (everything but plain floats and integers).
    pub fn is_quantized(self) -> bool {
        self.info().block_size > 1
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.info().name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.info().name), Some(t));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(31), None);
        assert_eq!(GgmlType::from_id(1000), None);
    }

    #[test]
    fn block_sizes_match_ggml() {
        // Sizes from the static_asserts in ggml-common.h.
        assert_eq!(GgmlType::Q4_K.info().type_size, 144);
        assert_eq!(GgmlType::Q6_K.info().type_size, 210);
        assert_eq!(GgmlType::Q3_K.info().type_size, 110);
        assert_eq!(GgmlType::Q2_K.info().type_size, 84);
        assert_eq!(GgmlType::Q5_K.info().type_size, 176);
        assert_eq!(GgmlType::IQ3_S.info().type_size, 110);
        assert_eq!(GgmlType::TQ1_0.info().type_size, 54);
        assert_eq!(GgmlType::IQ1_M.info().type_size, 56);
    }
}
