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

/// Push constants of `delta_net.wgsl`: [`DeltaNetParamsGpu`], then where q, k and v are read
/// (row strides and first columns, in floats) and q's and k's per-head L2 norms
/// (`x * mult / sqrt(sum x^2 + eps)`, applied with the `L2` form).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DeltaStepParamsGpu {
    pub base: DeltaNetParamsGpu,
    pub qk_stride: u32,
    pub v_stride: u32,
    pub q_off: u32,
    pub k_off: u32,
    pub v_off: u32,
    pub pad: u32,
    pub q_mult: f32,
    pub q_eps: f32,
    pub k_mult: f32,
    pub k_eps: f32,
}

/// Column slice. Bindings: X, Y.
pub fn slice_cols() -> KernelSpec {
    KernelSpec::new("slice_cols", &["common", "slice_cols"], 2, push_size::<SliceColsParams>())
}

/// Which pass of the causal convolution a `conv1d.wgsl` dispatch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPass {
    /// Every output, one thread per (token, channel).
    Outputs,
    /// The windows moved into the state slots (after [`ConvPass::Outputs`], which reads
    /// the old state).
    State,
    /// Both, one thread per (sequence run, channel) walking its run: one dispatch where
    /// runs are short ([`CONV_WALK_MAX_ROWS`]).
    Walk,
}

/// Most rows of a step whose convolution runs as one [`ConvPass::Walk`] dispatch (a thread
/// walks a run of up to this many tokens; longer steps take the two passes).
pub const CONV_WALK_MAX_ROWS: usize = 16;

/// Causal depthwise convolution, one pass. Bindings: X, taps, step, state, Y.
pub fn conv1d(pass: ConvPass) -> KernelSpec {
    let (name, phase) = match pass {
        ConvPass::Outputs => ("conv1d", 0),
        ConvPass::State => ("conv1d_state", 1),
        ConvPass::Walk => ("conv1d_walk", 2),
    };
    KernelSpec::new(name, &["common", "conv1d"], 5, push_size::<Conv1dParamsGpu>())
        .define("MAXK", CONV_MAX_KERNEL)
        .define("PHASE", phase)
}

/// Lanes per state row of the delta-rule kernel with subgroup shuffles, and state rows per
/// workgroup: 32 x 4 threads.
const DELTA_NET_LANES: u32 = 4;
const DELTA_NET_ROWS: u32 = 32;

/// Gated delta rule for heads of `head_dim`, with rows split over lanes where the device has
/// subgroup shuffles (`shuffles`) of at least 4 lanes and the head is a multiple of 32 rows;
/// with `l2`, q and k are L2-normalised per head as they are read. Bindings: q, k, v, alpha,
/// beta, decay, step, state, Y; push constants [`DeltaStepParamsGpu`].
pub fn delta_net(head_dim: u32, shuffles: bool, l2: bool) -> KernelSpec {
    let split = shuffles && head_dim % DELTA_NET_ROWS == 0;
    let (p, rows) = if split { (DELTA_NET_LANES, DELTA_NET_ROWS) } else { (1, head_dim) };
    let mut row_sum = String::new();
    let mut step = 1;
    while step < p {
        row_sum.push_str(&format!("    v += subgroupShuffleXor(v, {step}u);\n"));
        step *= 2;
    }
    let mut name = if split { format!("delta_net_d{head_dim}.x{p}") } else { format!("delta_net_d{head_dim}") };
    if l2 {
        name.push_str(".l2");
    }
    KernelSpec::new(name, &["common", "delta_rows", "delta_net"], 9, push_size::<DeltaStepParamsGpu>())
        .define("D", head_dim)
        .define("D2", 2 * head_dim)
        .define("P", p)
        .define("ROWS", rows)
        .define("WG", rows * p)
        .define("ROW_SUM", row_sum)
        .define("L2", l2)
}

/// Tokens per chunk of the chunked delta rule (its pass 1 keeps two C x C matrices in
/// workgroup memory).
pub const DELTA_CHUNK: u32 = 32;

/// Push constants of `delta_prep.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DeltaPrepParams {
    pub n_tokens: u32,
    pub n_k_head: u32,
    pub n_v_head: u32,
    pub pos_off: u32,
    pub seq_off: u32,
    pub pad: [u32; 3],
}

/// Whether heads of `head_dim` can take the chunked form (rows split over lanes, as in
/// [`delta_net`]'s split form, and at most 256 elements per row).
pub fn delta_chunked_fits(head_dim: u32, shuffles: bool) -> bool {
    shuffles && head_dim % DELTA_NET_ROWS == 0 && head_dim <= 256
}

/// Pass 1 of the chunked delta rule: each chunk's W, U, P and G. Bindings: q, k, v, alpha,
/// beta, decay, step, scratch.
pub fn delta_prep(head_dim: u32) -> KernelSpec {
    KernelSpec::new(format!("delta_prep_d{head_dim}"), &["common", "delta_prep"], 8, push_size::<DeltaPrepParams>())
        .define("D", head_dim)
        .define("C", DELTA_CHUNK)
        .define("CC", DELTA_CHUNK * DELTA_CHUNK)
}

/// Pass 2 of the chunked delta rule: states and outputs chunk by chunk. Bindings: q, k,
/// scratch, step, state, Y; push constants [`DeltaNetParamsGpu`].
pub fn delta_chunked(head_dim: u32) -> KernelSpec {
    let (p, rows) = (DELTA_NET_LANES, DELTA_NET_ROWS);
    let mut row_sum = String::new();
    let mut step = 1;
    while step < p {
        row_sum.push_str(&format!("    v += subgroupShuffleXor(v, {step}u);\n"));
        step *= 2;
    }
    KernelSpec::new(
        format!("delta_chunked_d{head_dim}.x{p}"),
        &["common", "delta_rows", "delta_chunked"],
        6,
        push_size::<DeltaNetParamsGpu>(),
    )
    .define("D", head_dim)
    .define("P", p)
    .define("ROWS", rows)
    .define("WG", rows * p)
    .define("C", DELTA_CHUNK)
    .define("ROW_SUM", row_sum)
}

/// f32 words of the chunked delta rule's scratch for `n_tokens` rows of `n_v_head` heads:
/// W and U like V, P rows of [`DELTA_CHUNK`], G.
pub fn delta_scratch_words(n_tokens: u64, n_v_head: u64, head_dim: u64) -> u64 {
    n_tokens * n_v_head * (2 * head_dim + DELTA_CHUNK as u64 + 1)
}

/// Workgroups of the delta-rule kernel for `n_tokens` rows and `n_v_head` heads.
pub fn delta_net_groups(head_dim: u32, shuffles: bool, n_tokens: u64, n_v_head: u64) -> u64 {
    let split = shuffles && head_dim % DELTA_NET_ROWS == 0;
    let blocks = if split { (head_dim / DELTA_NET_ROWS) as u64 } else { 1 };
    n_tokens * n_v_head * blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::compile_wgsl;

    #[test]
    fn recurrent_shaders_compile() {
        for spec in [
            slice_cols(),
            conv1d(ConvPass::Outputs),
            conv1d(ConvPass::State),
            conv1d(ConvPass::Walk),
            delta_net(32, false, false),
            delta_net(128, false, true),
            delta_net(32, true, true),
            delta_net(128, true, false),
            delta_net(256, true, true),
            delta_prep(128),
            delta_chunked(64),
            delta_chunked(128),
        ] {
            let src = spec.wgsl().unwrap();
            compile_wgsl(&spec.name, &src, false).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        }
    }
}
