//! ggml weight types: the block layouts llama.cpp defines, reference dequantization to f32,
//! and the quantizers we need (activation blocks for integer dot products, weight formats for
//! `infr synth`).
//!
//! Everything here is plain scalar code: it is the ground truth the fast CPU kernels and the
//! GPU shaders are tested against, and it mirrors `dequantize_row_*` in llama.cpp's
//! `ggml/src/ggml-quants.c`.

mod types;

pub use types::{GgmlType, TypeInfo};

/// Errors from quantization routines.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// The element count is not a multiple of the type's block size.
    #[error("{ty}: {n} elements is not a multiple of the block size {block}")]
    NotBlockAligned { ty: GgmlType, n: usize, block: usize },
    /// The byte buffer does not hold exactly the expected number of blocks.
    #[error("{ty}: expected {expected} bytes for {n} elements, got {got}")]
    WrongByteLength { ty: GgmlType, n: usize, expected: usize, got: usize },
    /// The type has no dequantizer (integer tensors, or a type removed from ggml).
    #[error("{0}: dequantization is not supported for this type")]
    Unsupported(GgmlType),
}
