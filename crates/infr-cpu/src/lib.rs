//! The CPU backend.
//!
//! Every op exists here first, written plainly and checked against llama.cpp; the Vulkan
//! backend is tested against it. Numerics follow llama.cpp's CPU backend where it matters for
//! matching its tokens: activations are quantized to the weight type's dot-product partner
//! (Q8_0 / Q8_1 / Q8_K, or rounded to f16/bf16) before a matmul, K and V are cached as f16, and
//! softmax sums run in f64.

mod backend;
mod kv;
mod matmul;
mod ops;
mod plan;
mod simd;
mod state;

pub use backend::{CpuBackend, CpuOptions, MAX_THREADS_PER_CORE};
pub use matmul::{act_type_for, KernelTier};
