//! Kernel specs (which WGSL, which template values) and their push-constant blocks.
//! Every struct here mirrors the `Params` struct of its shader field for field.

use bytemuck::{Pod, Zeroable};
use infr_core::Activation;

use crate::pipeline::KernelSpec;
use crate::repack::GpuLayout;

pub use crate::attn_kernels::*;
pub use crate::coop_kernels::*;
pub use crate::gemv_q8::*;

/// Threads per workgroup of the generic matmul.
pub const MATMUL_WG: u32 = 64;
/// Weight rows per workgroup of the generic matmul.
pub const MATMUL_R: u32 = 2;

/// Storage bindings of the generic matmul: W, X, Y, bias, tables.
pub const MATMUL_BINDINGS: u32 = 5;

/// Push constants of `matmul_generic.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MatmulParams {
    pub k: u32,
    pub m: u32,
    pub n: u32,
    pub out_stride: u32,
    pub out_col0: u32,
    pub soff: u32,
    pub has_bias: u32,
    pub tiles_m: u32,
}

/// Push constants of `matmul_vec_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MatmulQ8Params {
    pub mm: MatmulParams,
    /// vec4 offset of the block scales inside the quantized-activation binding.
    pub qs_off: u32,
}

/// Push constants of `quantize_act.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct QuantizeParams {
    pub k: u32,
    pub n_blocks: u32,
    pub scale_off: u32,
    /// Blocks of 32 sharing one scale: 1, or 8 to quantize like Q8_K (see [`q8k_acts`]).
    pub group: u32,
}

/// Push constants of [`quantize_pairs`]: [`QuantizeParams`] over the routed pairs' rows, then
/// the pairs per token and the pair count (where the weights start in the route).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct QuantizePairsParams {
    pub base: QuantizeParams,
    pub pairs_per_token: u32,
    pub n_pairs: u32,
}

/// Bytes of int8-quantized activations for `n` rows of `k`: packed quants then one vec4 of
/// scale and sums per 32 elements.
pub fn qact_bytes(n: usize, k: usize) -> u64 {
    (n * k + n * (k / 32) * 16) as u64
}

/// Activation quantization to int8 blocks of 32.
pub fn quantize_act() -> KernelSpec {
    KernelSpec::new(
        "quantize_act",
        &["common", "q8_block", "q8_store", "quantize_act"],
        3,
        push_size::<QuantizeParams>(),
    )
    .define("PAIR_FIELDS", "")
    .define("PAIR_BINDING", "")
    .define("INPUT_WORD", "    return X[w];")
}

/// [`quantize_act`] of each routed pair's expert input (its token's row times its routing
/// weight; mixtures that weight the input: Llama 4). Bindings: x, quants, scales, route.
pub fn quantize_pairs() -> KernelSpec {
    KernelSpec::new(
        "quantize_pairs",
        &["common", "q8_block", "q8_store", "moe_pair_row", "quantize_act"],
        4,
        push_size::<QuantizePairsParams>(),
    )
    .define("PAIR_FIELDS", "    pairs_per_token: u32,\n    n_pairs: u32,\n")
    .define("PAIR_BINDING", "@group(0) @binding(3) var<storage, read> ROUTE: array<u32>;")
    .define("INPUT_WORD", "    return pair_input_word(w, pc.k / 4u);")
}

/// Whether llama.cpp's CPU multiplies weights of type `ty` with activations quantized to
/// Q8_K (one scale per 256: every k-quant and i-quant with 256-element blocks;
/// `type_traits_cpu[ty].vec_dot_type`). The reference logits come from that path, and with
/// Qwen2.5's massive first-token activations its rounding changes the result visibly, so
/// the matmuls of these types see activations rounded the same way.
pub fn q8k_acts(ty: infr_quant::GgmlType) -> bool {
    ty.info().block_size == infr_quant::QK_K
}

/// How llama.cpp's CPU rounds the activations of a matmul with weights of type `ty`
/// (`type_traits_cpu[ty].vec_dot_type`), as a `round_act.wgsl` mode; `None` for f32 weights.
/// The float matmul kernels read activations rounded the same way so that the reference
/// logits are reproduced (see [`q8k_acts`] for why it matters).
pub fn act_round_mode(ty: infr_quant::GgmlType, k: usize) -> Option<u32> {
    use infr_quant::GgmlType::*;
    match ty {
        F32 => None,
        F16 => Some(ROUND_F16),
        BF16 => Some(ROUND_BF16),
        _ if q8k_acts(ty) => (k % 256 == 0).then_some(ROUND_Q8_K),
        _ => (k % 32 == 0).then_some(ROUND_Q8_0),
    }
}

/// The rounding of an f16 operand of a matmul with weights of type `ty` ([`round_act16`] and
/// the kernels writing such copies): [`act_round_mode`], or plain f16 where that has none.
pub fn act_round16_mode(ty: infr_quant::GgmlType, k: usize) -> u32 {
    act_round_mode(ty, k).unwrap_or(ROUND_F16)
}

/// Blocks of 32 per scale of an int8 rounding `mode` (8 for Q8_K, 1 for Q8_0), the `group` of
/// the kernels that quantize (or quantize and scale back) their output; `None` for the float
/// roundings.
pub fn int8_round_group(mode: u32) -> Option<u32> {
    match mode {
        ROUND_Q8_K => Some(8),
        ROUND_Q8_0 => Some(1),
        _ => None,
    }
}

/// `round_act.wgsl` mode: 8-bit quants, one f32 scale per 256 (`quantize_row_q8_K_ref`).
pub const ROUND_Q8_K: u32 = 0;
/// `round_act.wgsl` mode: 8-bit quants, one f16 scale per 32 (`quantize_row_q8_0_ref`; Q8_1's values are the same).
pub const ROUND_Q8_0: u32 = 1;
/// `round_act.wgsl` mode: round to f16.
pub const ROUND_F16: u32 = 2;
/// `round_act.wgsl` mode: round to bf16 (nearest even).
pub const ROUND_BF16: u32 = 3;

/// Push constants of `round_act.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RoundParams {
    /// Workgroups (256 elements each).
    pub n_groups: u32,
    /// Elements / 4.
    pub n_vec4: u32,
    /// One of the `ROUND_*` modes.
    pub mode: u32,
}

/// Activations rounded as llama.cpp's CPU rounds them and back to f32 (for the float matmul kernels).
pub fn round_act() -> KernelSpec {
    KernelSpec::new("round_act", &["common", "round_act"], 2, push_size::<RoundParams>())
        .define("Y_TY", "vec4<f32>")
        .define("STORE_Y", "Y[i] = y;")
}

/// [`round_act`] with f16 output (the operand of the cooperative matmul over f16 inputs):
/// the rounded values rounded to the nearest f16 (ties to even).
pub fn round_act16() -> KernelSpec {
    KernelSpec::new("round_act16", &["common", "round_act"], 2, push_size::<RoundParams>())
        .define("Y_TY", "vec2<u32>")
        .define("STORE_Y", "Y[i] = pack_f16x4(y);")
}

/// Weight types with an integer-dot matrix-vector kernel, and its lanes per block.
pub fn vec_q8_lanes(ty: infr_quant::GgmlType) -> Option<u32> {
    use infr_quant::GgmlType::*;
    match ty {
        Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | MXFP4 => Some(1),
        Q2_K | Q3_K | Q4_K | Q5_K => Some(4),
        Q6_K => Some(8),
        _ => None,
    }
}

/// Push constants of one extra job of `matmul_vec_q8.wgsl` (a weight of one chunk that
/// reads the same activations; its output rows are the weight's rows).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MatmulJobParams {
    pub m: u32,
    pub soff: u32,
    pub has_bias: u32,
    /// The job's first workgroup.
    pub tile0: u32,
}

/// Push constants of `embed.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct EmbedParams {
    pub cols: u32,
    pub row0: u32,
    pub rows: u32,
    pub soff: u32,
    pub n_tokens: u32,
    pub tok_off: u32,
}

/// Push constants of `mix_embed.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MixEmbedParams {
    pub cols: u32,
    pub row0: u32,
    pub rows: u32,
    pub soff: u32,
    pub n_tokens: u32,
    pub n_vocab: u32,
    pub slice_rows: u32,
}

/// Push constants of `mix_reduce.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MixReduceParams {
    pub n_words: u32,
    pub slices: u32,
    pub accumulate: u32,
}

/// Push constants of `norm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct NormParams {
    pub group: u32,
    pub n_groups: u32,
    pub eps: f32,
    pub has_weight: u32,
}

/// The RoPE fields of `rope_math.wgsl`'s `Rope` (rope.wgsl and qk_rope.wgsl carry one).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RopeGpu {
    pub theta_scale: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub mscale0: f32,
    pub corr0: f32,
    pub corr1: f32,
    pub yarn_mul: f32,
    pub has_ff: u32,
    pub n_rot: u32,
    pub neox: u32,
}

/// Push constants of `rope.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct RopeParamsGpu {
    pub rope: RopeGpu,
    pub cols: u32,
    pub head_dim: u32,
    pub n_rows: u32,
    pub pos_off: u32,
}

/// Push constants of `elementwise.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct EltParams {
    pub n: u32,
    pub s: f32,
    pub inv_s: f32,
}

/// Push constants of `gather_rows.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct GatherParams {
    pub cols: u32,
    pub n_out: u32,
    pub rows_off: u32,
}

pub(crate) fn push_size<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}

/// Source parts of a kernel that dequantizes through `wload` / `tload` over `W` and `TBL`
/// bindings (declared by the kernel itself): the dequantizers, their accessors, the kernel.
pub(crate) fn dequant_parts(l: &GpuLayout, kernel: &'static str) -> Vec<&'static str> {
    let mut parts = vec!["common", "dequant", "weight_io"];
    if l.deq.starts_with("iq") {
        parts.push("dequant_iq");
    }
    parts.push(kernel);
    parts
}

pub(crate) fn with_layout(spec: KernelSpec, l: &GpuLayout) -> KernelSpec {
    let mut s = spec
        .define("QW", l.qw)
        .define("SB", l.sb)
        .define("BLOCK", l.block_elems)
        .define("DEQ", format!("deq4_{}", l.deq))
        .define("W_WORD", "W[i]");
    for (k, v) in crate::tables::defines() {
        s = s.define(k, v);
    }
    s
}

/// Entry-point parameters and code of the workgroup reduction of `R*C` accumulators into
/// `total` (valid in threads `t < R*C`): subgroupAdd when the device has subgroup
/// arithmetic, a shared-memory tree otherwise.
pub(crate) fn with_reduce(spec: KernelSpec, subgroups: bool) -> KernelSpec {
    if subgroups {
        spec.define(
            "SG_PARAMS",
            ", @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_id) sgid: u32, @builtin(num_subgroups) nsg: u32",
        )
        .define(
            "REDUCE",
            "for (var j = 0u; j < R * C; j++) {
        let s = subgroupAdd(acc[j]);
        if sgi == 0u {
            red[j * WG + sgid] = s;
        }
    }
    workgroupBarrier();
    var total = 0.0;
    if t < R * C {
        for (var i = 0u; i < nsg; i++) {
            total += red[t * WG + i];
        }
    }",
        )
    } else {
        spec.define("SG_PARAMS", "").define(
            "REDUCE",
            "for (var j = 0u; j < R * C; j++) {
        red[j * WG + t] = acc[j];
    }
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if t < s {
            for (var j = 0u; j < R * C; j++) {
                red[j * WG + t] += red[j * WG + t + s];
            }
        }
        workgroupBarrier();
    }
    var total = 0.0;
    if t < R * C {
        total = red[t * WG];
    }",
        )
    }
}

/// Weight types with a fast matrix-vector kernel, and its lanes per block.
pub fn vec_lanes(ty: infr_quant::GgmlType) -> Option<u32> {
    use infr_quant::GgmlType::*;
    match ty {
        // MoE routers (llama.cpp keeps them f32): one lane per 4-element block.
        F32 => Some(1),
        Q8_0 => Some(8),
        Q4_K | Q6_K => Some(16),
        _ => None,
    }
}

/// Largest activation-row count the matrix-vector kernels take (batched decode of up to 16
/// sequences stays on them: the tiled GEMMs have too few workgroups for so few rows).
pub const VEC_MAX_COLS: usize = 16;

/// Threads per workgroup of the matrix-vector kernel.
pub const VEC_WG: u32 = 64;

/// Threads per workgroup of the matrix-vector kernel over an f32 weight (a MoE router: few
/// rows of up to a few thousand columns, one lane per 4 columns). With 64 threads and 2 rows a
/// workgroup, Qwen3.6-35B-A3B's 256x2048 router took 8.6 µs on an H100 (245 GB/s), each
/// thread walking 8 blocks of a row after one another; 256 threads take 2 blocks each.
pub const VEC_F32_WG: u32 = 256;

/// Threads per workgroup of the matrix-vector kernel for weight type `ty`.
pub fn vec_wg(ty: infr_quant::GgmlType) -> u32 {
    if ty == infr_quant::GgmlType::F32 {
        VEC_F32_WG
    } else {
        VEC_WG
    }
}

/// The fast matrix-vector kernel for `c` activation rows and `r` weight rows per workgroup
/// (needs subgroup arithmetic; `None` for types without one).
pub fn matmul_vec(l: &GpuLayout, c: u32, r: u32) -> Option<KernelSpec> {
    let tpb = vec_lanes(l.ty)?;
    let wg = vec_wg(l.ty);
    let spec = KernelSpec {
        name: format!("matmul_vec.{}", l.ty),
        parts: vec!["common", "dequant", "weight_io", "matmul_vec"],
        defines: Vec::new(),
        bindings: MATMUL_BINDINGS,
        push_bytes: push_size::<MatmulParams>(),
    }
    .define("WG", wg)
    .define("R", r)
    .define("C", c)
    .define("RC", r * c)
    .define("RED", wg * r * c)
    .define("TPB", tpb)
    .define("VDOT", format!("vdot_{}", l.deq));
    Some(with_reduce(with_layout(spec, l), true))
}

/// Weight rows and activation rows of one tile of the tiled matmul.
pub const TILE: u32 = 64;

/// The tiled matmul for prefill (portable; any weight type).
pub fn matmul_tiled(l: &GpuLayout) -> KernelSpec {
    tiled(l, false)
}

/// The tiled matmul with k split into ranges ([`SplitParams`]): workgroup `g` computes tile
/// `g % tiles` over range `g / tiles` into that range's plane of partial products.
pub fn matmul_tiled_split(l: &GpuLayout) -> KernelSpec {
    tiled(l, true)
}

/// `matmul_tiled.wgsl` over the whole of k, or one range of it per workgroup (`split`).
fn tiled(l: &GpuLayout, split: bool) -> KernelSpec {
    let (name, push_bytes, fields, range) = if split {
        (
            "matmul_tiled_split",
            push_size::<SplitParams>(),
            "    k_chunk: u32,\n    tiles: u32,\n    part_stride: u32,",
            "    let part = lin / pc.tiles;\n    let tile = lin % pc.tiles;\n    let k_begin = part * pc.k_chunk;\n    \
             let k_end = min(pc.k, k_begin + pc.k_chunk);\n    let plane = part * pc.part_stride;",
        )
    } else {
        (
            "matmul_tiled",
            push_size::<MatmulParams>(),
            "",
            "    let tile = lin;\n    let k_begin = 0u;\n    let k_end = pc.k;\n    let plane = 0u;",
        )
    };
    let spec = KernelSpec {
        name: format!("{name}.{}", l.ty),
        parts: dequant_parts(l, "matmul_tiled"),
        defines: Vec::new(),
        bindings: MATMUL_BINDINGS,
        push_bytes,
    }
    .define("SPLIT_FIELDS", fields)
    .define("SPLIT_RANGE", range);
    with_layout(spec, l)
}

/// The generic matmul for a weight layout, computing `c` activation rows per workgroup.
pub fn matmul_generic(l: &GpuLayout, c: u32, subgroups: bool) -> KernelSpec {
    let spec = KernelSpec {
        name: format!("matmul_generic.{}", l.ty),
        parts: dequant_parts(l, "matmul_generic"),
        defines: Vec::new(),
        bindings: MATMUL_BINDINGS,
        push_bytes: push_size::<MatmulParams>(),
    }
    .define("WG", MATMUL_WG)
    .define("R", MATMUL_R)
    .define("C", c)
    .define("RC", MATMUL_R * c)
    .define("RED", MATMUL_WG * MATMUL_R * c);
    with_reduce(with_layout(spec, l), subgroups)
}

/// Activation rows per workgroup of the generic matmul for `n` rows.
pub fn matmul_cols(n: usize) -> u32 {
    (n as u32).clamp(1, 4)
}

/// Embedding gather for a table layout.
pub fn embed(l: &GpuLayout) -> KernelSpec {
    let spec = KernelSpec {
        name: format!("embed.{}", l.ty),
        parts: dequant_parts(l, "embed"),
        defines: Vec::new(),
        bindings: 4,
        push_bytes: push_size::<EmbedParams>(),
    };
    with_layout(spec, l)
}

/// Embedding mixture (`mix_embed.wgsl`, partial sums per slice of the table's rows) for a
/// table layout. Bindings: table chunk, mixture, partial sums, tables.
pub fn mix_embed(l: &GpuLayout) -> KernelSpec {
    let spec = KernelSpec {
        name: format!("mix_embed.{}", l.ty),
        parts: dequant_parts(l, "mix_embed"),
        defines: vec![("TT", MIX_EMBED_TOKENS.to_string())],
        bindings: 4,
        push_bytes: push_size::<MixEmbedParams>(),
    };
    with_layout(spec, l)
}

/// The sum of the embedding mixture's partial sums (`mix_reduce.wgsl`). Bindings: partial
/// sums, output.
pub fn mix_reduce() -> KernelSpec {
    KernelSpec::new("mix_reduce", &["common", "mix_reduce"], 2, push_size::<MixReduceParams>())
}

/// Tokens each `mix_embed.wgsl` invocation accumulates.
pub const MIX_EMBED_TOKENS: usize = 16;

/// Most slices `mix_embed.wgsl` cuts a table chunk's rows into (split-K), and the fewest
/// rows a slice takes: a DiffusionGemma vocabulary (262,144 rows) runs as 16 slices, a small
/// one as one.
const MIX_EMBED_SLICES: usize = 16;
const MIX_EMBED_SLICE_MIN_ROWS: usize = 4096;

/// The slices and rows per slice `mix_embed.wgsl` takes a chunk of `rows` table rows in;
/// every slice holds rows (the reduction reads each one's partial sums).
pub fn mix_embed_slices(rows: usize) -> (usize, usize) {
    let want = (rows / MIX_EMBED_SLICE_MIN_ROWS).clamp(1, MIX_EMBED_SLICES);
    let slice_rows = rows.div_ceil(want).max(1);
    (rows.div_ceil(slice_rows).max(1), slice_rows)
}

/// RMS norm.
pub fn rms_norm() -> KernelSpec {
    KernelSpec::new("rms_norm", &["common", "tree_sum", "norm"], 3, push_size::<NormParams>())
}

/// RoPE.
pub fn rope() -> KernelSpec {
    KernelSpec::new("rope", &["common", "rope_math", "rope"], 4, push_size::<RopeParamsGpu>())
}

/// Elementwise op kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elt {
    Add,
    Mul,
    Scale,
    Softcap,
    Glu(Activation),
}

/// An elementwise kernel for `n` elements and its workgroup count: one vec4 per thread
/// when `n` is a multiple of 4, one element otherwise.
pub fn elementwise(op: Elt, n: usize) -> (KernelSpec, u32) {
    let (name, body) = elt_body(op);
    let spec = KernelSpec::new(name, &["common", "elementwise"], 3, push_size::<EltParams>()).define("OP", body);
    if n % 4 == 0 {
        let spec = spec.define("T", "vec4<f32>").define("VEC", 4).define("WG", ELT_WG4).define("APPLY", "op_v");
        (spec, (n / 4).div_ceil(ELT_WG4) as u32)
    } else {
        (spec.define("T", "f32").define("VEC", 1).define("WG", 64).define("APPLY", "op"), n.div_ceil(64) as u32)
    }
}

/// Threads per workgroup of the vec4 elementwise kernel.
const ELT_WG4: usize = 256;

/// Kernel name and WGSL body of `fn op(a: f32, b: f32) -> f32` for an elementwise op.
pub(crate) fn elt_body(op: Elt) -> (&'static str, &'static str) {
    match op {
        Elt::Add => ("add", "return a + b;"),
        Elt::Mul => ("mul", "return a * b;"),
        Elt::Scale => ("scale", "return a * pc.s;"),
        Elt::Softcap => ("softcap", "return tanh_exp(a * pc.inv_s) * pc.s;"),
        Elt::Glu(Activation::Silu) => ("glu_silu", "return a / (1.0 + exp(-a)) * b;"),
        Elt::Glu(Activation::GeluTanh) => ("glu_gelu", "return gelu_f16(a) * b;"),
        Elt::Glu(Activation::GeluTanhExact) => ("glu_gelu_exact", "return gelu_exact(a) * b;"),
        Elt::Glu(Activation::Sigmoid) => ("glu_sigmoid", "return b / (1.0 + exp(-a));"),
        // ggml_swiglu_oai with gpt-oss's alpha 1.702 and limit 7.
        Elt::Glu(Activation::SwigluOai) => {
            ("glu_swiglu_oai", "let x = min(a, 7.0); return x / (1.0 + exp(-1.702 * x)) * (clamp(b, -7.0, 7.0) + 1.0);")
        }
    }
}

/// Push constants of `temp_scale.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct TempScaleParamsGpu {
    pub cols: u32,
    pub n: u32,
    pub pos_off: u32,
    pub floor_scale: u32,
    pub scale: f32,
    pub offset: f32,
}

/// Rows scaled by their position's attention temperature. Bindings: X, step, Y.
pub fn temp_scale() -> KernelSpec {
    KernelSpec::new("temp_scale", &["common", "temp_scale"], 3, push_size::<TempScaleParamsGpu>())
}

/// Output-row gather.
pub fn gather_rows() -> KernelSpec {
    KernelSpec::new("output_rows", &["common", "gather_rows"], 3, push_size::<GatherParams>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::compile_wgsl;
    use crate::repack::gpu_layout;
    use infr_core::KvDType;
    use infr_quant::GgmlType;

    /// Compile with and without int dot; `INFR_VK_DUMP_SPV=<dir>` also writes the SPIR-V
    /// there (for `spirv-val`).
    fn check(spec: &KernelSpec) {
        let src = spec.wgsl().unwrap();
        for int_dot in [false, true] {
            match compile_wgsl(&spec.name, &src, int_dot) {
                Err(e) => panic!("{e}"),
                Ok(compiled) => {
                    let words = compiled.words;
                    if let Some(dir) = std::env::var_os("INFR_VK_DUMP_SPV") {
                        let p = std::path::Path::new(&dir).join(format!("{}.{int_dot}.spv", spec.name));
                        std::fs::write(p, bytemuck::cast_slice::<u32, u8>(&words)).unwrap();
                    }
                }
            }
        }
    }

    /// The weight-row tiles of 16 activation rows need 16 KiB of partial sums with tiles of 8:
    /// a device with less shared memory gets no tiled kernel (the caller falls back).
    #[test]
    fn row_tiles_respect_the_shared_memory_limit() {
        let l = gpu_layout(GgmlType::Q4_K).unwrap();
        assert!(matmul_rows_q8(&l, 16, 8, 1, 1, 16384).is_some());
        assert!(matmul_rows_q8(&l, 16, 8, 1, 1, 16383).is_none());
        assert!(matmul_rows_q8(&l, 16, 16, 2, 1, 16384).is_none());
    }

    #[test]
    fn every_shader_compiles() {
        for ty in GgmlType::ALL {
            if let Some(l) = gpu_layout(ty) {
                check(&matmul_generic(&l, 1, false));
                check(&matmul_generic(&l, 4, true));
                if let Some(s) = matmul_vec(&l, 3, 2) {
                    check(&s);
                }
                for jobs in 1..=MAX_GEMV_JOBS {
                    if let Some(s) = matmul_vec_q8(&l, 2, 2, jobs) {
                        check(&s);
                    }
                    for (c, r, rt) in [(16, 8, 1), (8, 16, 2), (4, 8, 4)] {
                        if let Some(s) = matmul_rows_q8(&l, c, r, rt, jobs, 32768) {
                            check(&s);
                        }
                    }
                }
                check(&embed(&l));
                check(&matmul_tiled(&l));
                check(&matmul_tiled_split(&l));
                for f in [16, 8] {
                    let tiles = [
                        coop_tile(4096, 512, f, 49152, false),
                        coop_tile(1024, 512, f, 49152, false),
                        coop_tile(64, 64, f, 32768, false),
                    ];
                    for tile in tiles {
                        // Every read-ahead depth (INFR_VK_COOP_STAGES), though quantized
                        // operands read one step ahead by default.
                        for stages in 0..=2 {
                            for raw_units in [false, true] {
                                let coop = crate::features::Coop { frag: f, subgroup: 32, raw_units };
                                check(&matmul_coop(CoopOperands::Quantized(&l), coop, CoopTile { stages, ..tile }));
                            }
                        }
                    }
                }
                check(&dequant_f16(&l, false).0);
                check(&dequant_f16(&l, true).0);
                for (sg, r) in [(false, 2), (true, 2), (true, 8)] {
                    check(&crate::moe_kernels::matmul_moe(&l, sg, r, false));
                    check(&crate::moe_kernels::matmul_moe(&l, sg, r, true));
                }
                for (r, tiled) in [(2, None), (4, None), (8, Some(49152)), (32, Some(32768))] {
                    for (gate_up, shared) in [(false, false), (true, false), (false, true), (true, true)] {
                        if let Some(s) = crate::moe_kernels::matmul_vec_q8_moe(&l, r, gate_up, tiled, shared) {
                            check(&s);
                        }
                    }
                }
                for (f, shared) in [(16, 49152), (8, 49152), (8, 32768)] {
                    let tile = crate::moe_kernels::moe_coop_tile(f, shared);
                    for raw_units in [false, true] {
                        let coop = crate::features::Coop { frag: f, subgroup: 32, raw_units };
                        check(&matmul_coop(CoopOperands::Experts(&l), coop, tile));
                        // A narrower tile with more subgroups along the weight rows (tuning knob).
                        let narrow = CoopTile { bn: 32, gm: 4, gn: 2, ..tile };
                        check(&matmul_coop(CoopOperands::Experts(&l), coop, narrow));
                    }
                }
                let wide = CoopTile { frag: 16, bm: 128, bn: 128, gm: 2, gn: 4, bk: 64, raster: 8, stages: 2 };
                let coop = crate::features::Coop { frag: 16, subgroup: 32, raw_units: true };
                check(&matmul_coop(CoopOperands::Quantized(&l), coop, wide));
            }
        }
        check(&round_act16());
        check(&rms_norm());
        check(&crate::fused_kernels::norm_add());
        check(&rope());
        for dt in [KvDType::F16, KvDType::F32] {
            check(&kv_write(dt));
            for sg in [false, true] {
                check(&attention(dt, 64, 64, sg));
                check(&attention(dt, 256, 512, sg));
            }
        }
        for op in [
            Elt::Add,
            Elt::Mul,
            Elt::Scale,
            Elt::Softcap,
            Elt::Glu(Activation::Silu),
            Elt::Glu(Activation::GeluTanh),
            Elt::Glu(Activation::GeluTanhExact),
            Elt::Glu(Activation::SwigluOai),
            Elt::Glu(Activation::Sigmoid),
        ] {
            check(&elementwise(op, 8).0);
            check(&elementwise(op, 7).0);
        }
        check(&gather_rows());
        check(&temp_scale());
        check(&attention_combine());
        for d in [64, 128] {
            for dtype in [KvDType::F16, KvDType::Q8_0] {
                check(&attention_coop(d, 16, 32, dtype).unwrap());
                check(&attention_coop(d, 8, 8, dtype).unwrap());
            }
        }
        check(&quantize_act());
        check(&quantize_pairs());
        check(&crate::moe_kernels::moe_pair_inputs());
        check(&round_act());
        check(&crate::moe_kernels::moe_route(128));
        check(&crate::moe_kernels::moe_route(4096));
        check(&crate::moe_kernels::moe_combine());
        check(&crate::moe_kernels::moe_tiles());
        for act in [Activation::Silu, Activation::GeluTanh, Activation::GeluTanhExact, Activation::SwigluOai] {
            check(&crate::moe_kernels::moe_glu(act));
        }
    }
}
