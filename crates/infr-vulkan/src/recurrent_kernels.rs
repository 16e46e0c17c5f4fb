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

/// How the one-step delta rule spreads a head's state over threads: `lanes` adjacent lanes of
/// a subgroup per state row, `rows` rows per workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaShape {
    pub lanes: u32,
    pub rows: u32,
}

/// Most tokens the delta-rule kernel stages at once: 16, or fewer where 16 tokens' k | q of
/// `head_dim` would pass 16 KiB. `tuned` (`INFR_VK_DELTA_BLOCK`, 1 to 64) replaces it where
/// the block's k | q, v rows and gates fit in `shared_bytes` beside the kernel's other
/// workgroup memory.
pub fn delta_block_tokens(head_dim: u32, shape: DeltaShape, shared_bytes: u32, tuned: Option<u32>) -> u32 {
    let bytes = |tb: u32| 4 * tb * (2 * head_dim + shape.rows + 2) + 64;
    if let Some(tb) = tuned {
        if (1..=64).contains(&tb) && bytes(tb) <= shared_bytes {
            return tb;
        }
        tracing::warn!(tb, head_dim, "INFR_VK_DELTA_BLOCK does not fit this device and head; using the default");
    }
    let mut tb = (4096 / (2 * head_dim)).clamp(1, 16);
    while tb > 1 && bytes(tb) > shared_bytes {
        tb /= 2;
    }
    tb
}

/// The delta rule's shape for heads of `head_dim` on a device whose smallest subgroup with
/// shuffles is `min_subgroup` (0: no shuffles): 32 rows of 4 lanes where shuffles reach 4
/// lanes and the head is a multiple of 32 rows, else a thread per row of the whole head.
/// `tuned` (`INFR_VK_DELTA_SHAPE`) replaces it where it fits: lanes a power of two within
/// the subgroup (1 without shuffles), rows dividing the head, at most 1,024 threads.
pub fn delta_net_shape(head_dim: u32, min_subgroup: u32, tuned: Option<(u32, u32)>) -> DeltaShape {
    if let Some((lanes, rows)) = tuned {
        let lanes_ok = lanes.is_power_of_two() && (lanes == 1 || lanes <= min_subgroup) && lanes <= head_dim;
        if lanes_ok && rows > 0 && head_dim % rows == 0 && rows * lanes <= 1024 {
            return DeltaShape { lanes, rows };
        }
        tracing::warn!(
            lanes,
            rows,
            head_dim,
            "INFR_VK_DELTA_SHAPE does not fit this device and head; using the default"
        );
    }
    if min_subgroup >= DELTA_NET_LANES && head_dim % DELTA_NET_ROWS == 0 {
        DeltaShape { lanes: DELTA_NET_LANES, rows: DELTA_NET_ROWS }
    } else {
        DeltaShape { lanes: 1, rows: head_dim }
    }
}

/// Gated delta rule for heads of `head_dim`, its state spread over threads as `shape` says
/// ([`delta_net_shape`]); with `l2`, q and k are L2-normalised per head as they are read.
/// Bindings: q, k, v, alpha, beta, decay, step, state, Y; push constants
/// [`DeltaStepParamsGpu`].
pub fn delta_net(head_dim: u32, shape: DeltaShape, block_tokens: u32, l2: bool) -> KernelSpec {
    let DeltaShape { lanes: p, rows } = shape;
    let mut row_sum = String::new();
    let mut step = 1;
    while step < p {
        row_sum.push_str(&format!("    v += subgroupShuffleXor(v, {step}u);\n"));
        step *= 2;
    }
    let mut name = match (p, rows) {
        (1, r) if r == head_dim => format!("delta_net_d{head_dim}"),
        (DELTA_NET_LANES, DELTA_NET_ROWS) => format!("delta_net_d{head_dim}.x{p}"),
        _ => format!("delta_net_d{head_dim}.r{rows}x{p}"),
    };
    if l2 {
        name.push_str(".l2");
    }
    KernelSpec::new(name, &["common", "delta_rows", "delta_net"], 9, push_size::<DeltaStepParamsGpu>())
        .define("D", head_dim)
        .define("TB", block_tokens)
        .define("KQ", 2 * head_dim * block_tokens)
        .define("VR", rows * block_tokens)
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

/// Lanes per state row and rows per workgroup of the chunked delta rule's pass 2.
pub const DELTA_CHUNKED_LANES: u32 = DELTA_NET_LANES;
pub const DELTA_CHUNKED_ROWS: u32 = DELTA_NET_ROWS;

/// Pass 2 of the chunked delta rule: states and outputs chunk by chunk. Bindings: q, k,
/// scratch, step, state, Y; push constants [`DeltaNetParamsGpu`].
pub fn delta_chunked(head_dim: u32) -> KernelSpec {
    let (p, rows) = (DELTA_CHUNKED_LANES, DELTA_CHUNKED_ROWS);
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

/// Workgroups of the delta-rule kernel of `shape` for `n_tokens` rows and `n_v_head` heads.
pub fn delta_net_groups(head_dim: u32, shape: DeltaShape, n_tokens: u64, n_v_head: u64) -> u64 {
    n_tokens * n_v_head * (head_dim / shape.rows) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::compile_wgsl;

    #[test]
    fn delta_shapes_fit_the_device_and_head() {
        let default = DeltaShape { lanes: DELTA_NET_LANES, rows: DELTA_NET_ROWS };
        let thread_a_row = |d| DeltaShape { lanes: 1, rows: d };
        assert_eq!(delta_net_shape(128, 32, None), default);
        assert_eq!(delta_net_shape(128, 0, None), thread_a_row(128));
        assert_eq!(delta_net_shape(48, 32, None), thread_a_row(48));
        assert_eq!(delta_net_shape(128, 32, Some((8, 16))), DeltaShape { lanes: 8, rows: 16 });
        assert_eq!(delta_net_shape(128, 0, Some((1, 64))), DeltaShape { lanes: 1, rows: 64 });
        // Lanes past the subgroup, not a power of two, rows not dividing the head, or more
        // than 1,024 threads: the default.
        assert_eq!(delta_net_shape(128, 8, Some((16, 8))), default);
        assert_eq!(delta_net_shape(128, 32, Some((3, 16))), default);
        assert_eq!(delta_net_shape(128, 32, Some((4, 48))), default);
        assert_eq!(delta_net_shape(256, 32, Some((8, 256))), default);
        assert_eq!(delta_net_groups(128, DeltaShape { lanes: 8, rows: 16 }, 3, 32), 3 * 32 * 8);
    }

    #[test]
    fn delta_blocks_fit_workgroup_memory() {
        let split = DeltaShape { lanes: 4, rows: 32 };
        let whole = |d| DeltaShape { lanes: 1, rows: d };
        assert_eq!(delta_block_tokens(128, split, 32768, None), 16);
        assert_eq!(delta_block_tokens(256, whole(256), 32768, None), 8);
        assert_eq!(delta_block_tokens(32, split, 32768, None), 16);
        // 16 tokens of 128-dim k | q and 128 rows (25 KiB) past 16 KiB: 8 tokens.
        assert_eq!(delta_block_tokens(128, whole(128), 16384, None), 8);
        assert_eq!(delta_block_tokens(128, split, 49152, Some(32)), 32);
        assert_eq!(delta_block_tokens(128, split, 32768, Some(64)), 16);
        assert_eq!(delta_block_tokens(128, split, 32768, Some(0)), 16);
    }

    #[test]
    fn recurrent_shaders_compile() {
        for spec in [
            slice_cols(),
            conv1d(ConvPass::Outputs),
            conv1d(ConvPass::State),
            conv1d(ConvPass::Walk),
            delta_net(32, delta_net_shape(32, 0, None), 16, false),
            delta_net(128, delta_net_shape(128, 0, None), 16, true),
            delta_net(32, delta_net_shape(32, 32, None), 1, true),
            delta_net(128, delta_net_shape(128, 32, None), 16, false),
            delta_net(256, delta_net_shape(256, 32, None), 8, true),
            delta_net(128, delta_net_shape(128, 32, Some((16, 8))), 4, true),
            delta_net(128, delta_net_shape(128, 32, Some((2, 64))), 16, false),
            delta_prep(128),
            delta_chunked(64),
            delta_chunked(128),
        ] {
            let src = spec.wgsl().unwrap();
            compile_wgsl(&spec.name, &src, false).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        }
    }
}
