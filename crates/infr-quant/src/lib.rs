//! ggml weight types: the block layouts llama.cpp defines, reference dequantization to f32,
//! and the quantizers we need (activation blocks for integer dot products, weight formats for
//! `infr synth`).
//!
//! Everything here is plain scalar code: it is the ground truth the fast CPU kernels and the
//! GPU shaders are tested against. Each routine mirrors its llama.cpp counterpart
//! (`dequantize_row_*` / `quantize_row_*_ref` in `ggml/src/ggml-quants.c`, commit 0c1e57098)
//! with the same float operation order, so results are bit-exact; `tests/llama_vectors.rs`
//! checks that against vectors produced by llama.cpp itself.
//!
//! Layout: [`blocks`] (block structs and byte offsets), [`float`] (f16/bf16 as ggml converts
//! them), [`legacy`] (Q4_0…Q8_1), [`kquants`] / [`kquants_quant`] (Q2_K…Q8_K), [`iquants`]
//! with [`iq_tables`] / [`iq1_tables`] (IQ*), [`ternary`] (TQ1_0, TQ2_0, Q1_0, Q2_0) and
//! [`fp4`] (MXFP4, NVFP4). All data is little-endian.

#![warn(missing_docs)]

pub mod blocks;
pub mod float;
pub mod fp4;
pub mod iq1_tables;
pub mod iq_tables;
pub mod iquants;
pub mod kquants;
pub mod kquants_quant;
pub mod legacy;
pub mod ternary;
mod types;

pub use blocks::{BlockQ8_0, BlockQ8_1, BlockQ8_K};
pub use kquants::quantize_row_q8_k;
pub use legacy::{quantize_row_q8_0, quantize_row_q8_1};
pub use types::{GgmlType, TypeInfo, QK_K};

/// Errors from quantization routines.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The element count is not a multiple of the type's block size.
    #[error("{ty}: {n} elements is not a multiple of the block size {block}")]
    NotBlockAligned {
        /// The type.
        ty: GgmlType,
        /// The element count given.
        n: usize,
        /// Elements per block of `ty`.
        block: usize,
    },
    /// The byte buffer does not hold exactly the expected number of blocks.
    #[error("{ty}: expected {expected} bytes for {n} elements, got {got}")]
    WrongByteLength {
        /// The type.
        ty: GgmlType,
        /// The element count.
        n: usize,
        /// Bytes that `n` elements of `ty` take.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// The type has no dequantizer (integer tensors, or a type removed from ggml).
    #[error("{0}: dequantization is not supported for this type")]
    Unsupported(GgmlType),
    /// The type has no quantizer here (i-quant grids and integer types).
    #[error("{0}: quantization is not supported for this type")]
    QuantizeUnsupported(GgmlType),
    /// A byte buffer whose length is not a whole number of blocks.
    #[error("{ty}: {len} bytes is not a multiple of the block size {type_size} bytes")]
    PartialBlock {
        /// The type.
        ty: GgmlType,
        /// Bytes given.
        len: usize,
        /// Bytes per block of `ty`.
        type_size: usize,
    },
}

/// A row dequantizer: whole blocks in, `block_size` floats per block out.
type DequantFn = fn(&[u8], &mut [f32]);
/// A row quantizer: `block_size` floats per block in, whole blocks out.
type QuantFn = fn(&[f32], &mut [u8]);

fn dequant_fn(ty: GgmlType) -> Option<DequantFn> {
    use GgmlType::*;
    Some(match ty {
        F32 => plain::f32s,
        F16 => plain::f16s,
        BF16 => plain::bf16s,
        F64 => plain::f64s,
        I8 => plain::i8s,
        I16 => plain::i16s,
        I32 => plain::i32s,
        I64 => plain::i64s,
        Q4_0 => legacy::dequantize_q4_0,
        Q4_1 => legacy::dequantize_q4_1,
        Q5_0 => legacy::dequantize_q5_0,
        Q5_1 => legacy::dequantize_q5_1,
        Q8_0 => legacy::dequantize_q8_0,
        Q8_1 => legacy::dequantize_q8_1,
        Q2_K => kquants::dequantize_q2_k,
        Q3_K => kquants::dequantize_q3_k,
        Q4_K => kquants::dequantize_q4_k,
        Q5_K => kquants::dequantize_q5_k,
        Q6_K => kquants::dequantize_q6_k,
        Q8_K => kquants::dequantize_q8_k,
        IQ2_XXS => iquants::dequantize_iq2_xxs,
        IQ2_XS => iquants::dequantize_iq2_xs,
        IQ2_S => iquants::dequantize_iq2_s,
        IQ3_XXS => iquants::dequantize_iq3_xxs,
        IQ3_S => iquants::dequantize_iq3_s,
        IQ1_S => iquants::dequantize_iq1_s,
        IQ1_M => iquants::dequantize_iq1_m,
        IQ4_NL => iquants::dequantize_iq4_nl,
        IQ4_XS => iquants::dequantize_iq4_xs,
        TQ1_0 => ternary::dequantize_tq1_0,
        TQ2_0 => ternary::dequantize_tq2_0,
        Q1_0 => ternary::dequantize_q1_0,
        Q2_0 => ternary::dequantize_q2_0,
        MXFP4 => fp4::dequantize_mxfp4,
        NVFP4 => fp4::dequantize_nvfp4,
    })
}

fn quant_fn(ty: GgmlType) -> Option<QuantFn> {
    use GgmlType::*;
    Some(match ty {
        F32 => plain::to_f32s,
        F16 => plain::to_f16s,
        BF16 => plain::to_bf16s,
        Q4_0 => legacy::quantize_q4_0,
        Q4_1 => legacy::quantize_q4_1,
        Q5_0 => legacy::quantize_q5_0,
        Q5_1 => legacy::quantize_q5_1,
        Q8_0 => legacy::quantize_q8_0,
        Q8_1 => legacy::quantize_q8_1,
        Q2_K => kquants_quant::quantize_q2_k,
        Q3_K => kquants_quant::quantize_q3_k,
        Q4_K => kquants_quant::quantize_q4_k,
        Q5_K => kquants_quant::quantize_q5_k,
        Q6_K => kquants_quant::quantize_q6_k,
        Q8_K => kquants::quantize_q8_k,
        IQ4_NL => iquants::quantize_iq4_nl,
        IQ4_XS => iquants::quantize_iq4_xs,
        TQ1_0 => ternary::quantize_tq1_0,
        TQ2_0 => ternary::quantize_tq2_0,
        Q1_0 => ternary::quantize_q1_0,
        Q2_0 => ternary::quantize_q2_0,
        MXFP4 => fp4::quantize_mxfp4,
        NVFP4 => fp4::quantize_nvfp4,
        F64 | I8 | I16 | I32 | I64 | IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M => return None,
    })
}

/// True if [`dequantize`] handles `ty` (every type ggml still defines).
pub fn can_dequantize(ty: GgmlType) -> bool {
    dequant_fn(ty).is_some()
}

/// True if [`quantize`] handles `ty`: every type with a `from_float_ref` in llama.cpp except
/// the grid i-quants (IQ2_S, IQ3_XXS, IQ3_S), plus Q8_K.
pub fn can_quantize(ty: GgmlType) -> bool {
    quant_fn(ty).is_some()
}

/// Check that `n` elements are block aligned and that `bytes` is their exact encoded size.
fn check_lengths(ty: GgmlType, n: usize, bytes: usize) -> Result<(), QuantError> {
    let info = ty.info();
    if n % info.block_size != 0 {
        return Err(QuantError::NotBlockAligned { ty, n, block: info.block_size });
    }
    let expected = (n / info.block_size).saturating_mul(info.type_size);
    if bytes != expected {
        return Err(QuantError::WrongByteLength { ty, n, expected, got: bytes });
    }
    Ok(())
}

/// Dequantize `src` (whole blocks of type `ty`) into `dst`, whose length is the element count.
///
/// Bit-exact with llama.cpp's `to_float` for every type that has one; F32 is copied bit for
/// bit, F64 and the integer types are converted with `as f32`, Q8_1 is `d * q`.
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let f = dequant_fn(ty).ok_or(QuantError::Unsupported(ty))?;
    check_lengths(ty, dst.len(), src.len())?;
    f(src, dst);
    Ok(())
}

/// Number of elements encoded by `bytes` bytes of `ty`, or an error for a partial block.
pub fn elements_in(ty: GgmlType, bytes: usize) -> Result<usize, QuantError> {
    let info = ty.info();
    if bytes % info.type_size != 0 {
        return Err(QuantError::PartialBlock { ty, len: bytes, type_size: info.type_size });
    }
    Ok(bytes / info.type_size * info.block_size)
}

/// Dequantize all of `src` into a new vector (its length follows from the byte count).
pub fn dequantize_to_vec(ty: GgmlType, src: &[u8]) -> Result<Vec<f32>, QuantError> {
    dequant_fn(ty).ok_or(QuantError::Unsupported(ty))?;
    let mut out = vec![0f32; elements_in(ty, src.len())?];
    dequantize(ty, src, &mut out)?;
    Ok(out)
}

/// Quantize `src` (a whole number of blocks) to `ty` into `dst` (exactly the encoded size).
/// See [`quantize`].
pub fn quantize_into(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    let f = quant_fn(ty).ok_or(QuantError::QuantizeUnsupported(ty))?;
    check_lengths(ty, src.len(), dst.len())?;
    f(src, dst);
    Ok(())
}

/// Quantize `src` to `ty`, bit-exact with llama.cpp's `from_float_ref` (`quantize_row_*_ref`,
/// the path llama-quantize takes without an importance matrix; Q8_K uses
/// `quantize_row_q8_K_ref`). F16/BF16 round to nearest even as ggml does. Inputs are assumed
/// finite: ggml's behaviour on NaN/inf is undefined C and is not reproduced.
///
/// For every type except IQ4_NL this is also what `ggml_quantize_chunk` (llama-quantize) does
/// without an importance matrix; for IQ4_NL llama-quantize searches more scales (`ntry = 7`)
/// than `quantize_row_iq4_nl_ref`, which this follows.
pub fn quantize(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, QuantError> {
    quant_fn(ty).ok_or(QuantError::QuantizeUnsupported(ty))?;
    let info = ty.info();
    if src.len() % info.block_size != 0 {
        return Err(QuantError::NotBlockAligned { ty, n: src.len(), block: info.block_size });
    }
    let mut out = vec![0u8; src.len() / info.block_size * info.type_size];
    quantize_into(ty, src, &mut out)?;
    Ok(out)
}

/// Plain (non-block) element types.
mod plain {
    use crate::float::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

    macro_rules! le_conv {
        ($name:ident, $t:ty, |$v:ident| $conv:expr) => {
            pub(crate) fn $name(src: &[u8], dst: &mut [f32]) {
                const N: usize = core::mem::size_of::<$t>();
                for (b, y) in src.chunks_exact(N).zip(dst.iter_mut()) {
                    let mut a = [0u8; N];
                    a.copy_from_slice(b);
                    let $v = <$t>::from_le_bytes(a);
                    *y = $conv;
                }
            }
        };
    }

    le_conv!(f32s, f32, |v| v);
    le_conv!(f16s, u16, |v| f16_to_f32(v));
    le_conv!(bf16s, u16, |v| bf16_to_f32(v));
    le_conv!(f64s, f64, |v| v as f32);
    le_conv!(i8s, i8, |v| v as f32);
    le_conv!(i16s, i16, |v| v as f32);
    le_conv!(i32s, i32, |v| v as f32);
    le_conv!(i64s, i64, |v| v as f32);

    pub(crate) fn to_f32s(src: &[f32], dst: &mut [u8]) {
        for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
            b.copy_from_slice(&x.to_le_bytes());
        }
    }

    pub(crate) fn to_f16s(src: &[f32], dst: &mut [u8]) {
        for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
            b.copy_from_slice(&f32_to_f16(*x).to_le_bytes());
        }
    }

    pub(crate) fn to_bf16s(src: &[f32], dst: &mut [u8]) {
        for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
            b.copy_from_slice(&f32_to_bf16(*x).to_le_bytes());
        }
    }
}
