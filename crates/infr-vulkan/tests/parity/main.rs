//! Vulkan backend parity tests: every op and every weight type against the CPU reference
//! backend and plain f32 references, plus a tiny random model end to end. They run on
//! lavapipe; `INFR_REQUIRE_VULKAN=1` makes a missing device a failure.

mod attention;
mod canvas;
mod common;
mod matmul;
mod model;
mod moe;
mod ops;
mod prefill;
mod readback;
mod recurrent;
