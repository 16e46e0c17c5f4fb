//! Kernel specs and push constants of the recurrent ops and column slices
//! (`shaders/conv1d.wgsl`, `delta_net.wgsl`, `slice_cols.wgsl`).

use bytemuck::{Pod, Zeroable};

use crate::kernels::push_size;
use crate::pipeline::KernelSpec;

/// Most convolution taps the conv kernel keeps in registers (real models use 4).
pub const CONV_MAX_KERNEL: u32 = 8;

/// Head dims the delta-rule kernel is built for (one thread per state row).
pub const DELTA_NET_HEAD_DIMS: std::ops::RangeInclusive<u32> = 1..=256;

/// Push constants of `slice_cols.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct SliceColsParams {
    pub n: u32,
    pub in_cols: u32,
    pub out_cols: u32,
    pub period: u32,
    pub offset: u32,
    pub len: u32,
}

/// Push constants of `conv1d.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct Conv1dParamsGpu {
    pub n_tokens: u32,
    pub channels: u32,
    pub kernel: u32,
    pub silu: u32,
    pub pos_off: u32,
    pub seq_off: u32,
    pub state_off: u32,
    pub slot_floats: u32,
}

/// Push constants of `delta_net.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DeltaNetParamsGpu {
    pub n_tokens: u32,
    pub n_k_head: u32,
    pub n_v_head: u32,
    pub scale: f32,
    pub pos_off: u32,
    pub seq_off: u32,
    pub state_off: u32,
    pub pad: u32,
}

/// Column slice. Bindings: X, Y.
pub fn slice_cols() -> KernelSpec {
    KernelSpec::new("slice_cols", &["common", "slice_cols"], 2, push_size::<SliceColsParams>())
}

/// Causal depthwise convolution. Bindings: X, taps, step, state, Y.
pub fn conv1d() -> KernelSpec {
    KernelSpec::new("conv1d", &["common", "conv1d"], 5, push_size::<Conv1dParamsGpu>()).define("MAXK", CONV_MAX_KERNEL)
}

/// Gated delta rule for heads of `head_dim`. Bindings: q, k, v, alpha, beta, decay, step,
/// state, Y.
pub fn delta_net(head_dim: u32) -> KernelSpec {
    KernelSpec::new(format!("delta_net_d{head_dim}"), &["common", "delta_net"], 9, push_size::<DeltaNetParamsGpu>())
        .define("D", head_dim)
        .define("D2", 2 * head_dim)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::compile_wgsl;

    #[test]
    fn recurrent_shaders_compile() {
        for spec in [slice_cols(), conv1d(), delta_net(32), delta_net(128)] {
            let src = spec.wgsl().unwrap();
            compile_wgsl(&spec.name, &src, false).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        }
    }
}
