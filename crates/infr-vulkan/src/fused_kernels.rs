//! Kernels that do the work of several graph nodes in one dispatch (see `fusion`): decode
//! steps of small models are bound by the number of dispatches, each costing microseconds
//! of launch and barrier on real GPUs, more than the arithmetic of most of them.

use bytemuck::{Pod, Zeroable};
use infr_core::{Activation, KvDType};

use crate::kernels::{elt_body, kv_defines, push_size, Elt};
use crate::pipeline::KernelSpec;

/// Widest row `norm_q8.wgsl` keeps in registers (NJ vec4s of 256 invocations).
pub const NORM_Q8_MAX_COLS: usize = 8 * 1024;

/// Push constants of `norm_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct NormQ8Params {
    pub k: u32,
    pub n_rows: u32,
    pub eps: f32,
    pub has_weight: u32,
    pub has_add: u32,
    /// Blocks of 32 sharing one scale (1, or 8 for Q8_K rounding).
    pub group: u32,
    /// vec4 offset of the block scales in the quantized-activation buffer.
    pub scale_off: u32,
    /// Partial-product planes bound as B (1: B is the tensor itself) and the vec4s between
    /// them (a split-K matmul whose reduction this kernel does).
    pub b_parts: u32,
    pub b_stride: u32,
    /// A normed before the add: [`NORM_A`], with [`WEIGHT_A`] where its norm has a weight;
    /// [`NO_FINAL_NORM`] where the sum is quantized as it is.
    pub pre_norm: u32,
    pub eps_a: f32,
    /// Factor of the sum (a scale node after the add; 1 for none).
    pub add_scale: f32,
}

/// What a quantizing kernel (`norm_q8`, `glu_q8`) writes beside its f32 output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantOut {
    /// Int8 words and block scales, for the integer-dot matmuls (`q8_store.wgsl`).
    Int8,
    /// The same quantization scaled back and stored as f16: the operand of the split-K
    /// cooperative matmul, as `round_act16` would write it (`q8_round16.wgsl`).
    F16,
}

impl QuantOut {
    /// The shader part writing it, its function, the element type of the Q binding and the
    /// kernel-name suffix.
    fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            QuantOut::Int8 => ("q8_store", "quant_vec4", "u32", ""),
            QuantOut::F16 => ("q8_round16", "round16_vec4", "vec2<u32>", "_f16"),
        }
    }
}

/// Residual add (optional, of A normed or not) + whole-row RMS norm + int8 quantization of the
/// result (or its f16 rounding, `out`). Bindings: A, B, sum, norm output, weight, quants,
/// scales (unused for f16), A's norm weight.
pub fn norm_q8(out: QuantOut) -> KernelSpec {
    let (part, f, elem, suffix) = out.parts();
    KernelSpec::new(
        format!("norm_q8{suffix}"),
        &["common", "q8_block", part, "norm_q8"],
        8,
        push_size::<NormQ8Params>(),
    )
    .define("QUANT", f)
    .define("Q_ELEM", elem)
}

/// Push constants of `norm_add.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct NormAddParams {
    pub k: u32,
    pub n_rows: u32,
    pub eps_a: f32,
    pub eps_b: f32,
    /// [`NORM_A`], [`WEIGHT_A`], [`HAS_B`], [`NORM_B`], [`WEIGHT_B`].
    pub flags: u32,
    pub scale: f32,
}

/// `norm_add` flag: A is RMS-normed.
pub const NORM_A: u32 = 1;
/// `norm_add` flag: A's norm has a weight.
pub const WEIGHT_A: u32 = 2;
/// `norm_q8`'s `pre_norm` bit: no final norm, the sum itself is quantized (and no Y written).
pub const NO_FINAL_NORM: u32 = 4;
/// `norm_add` flag: B is added.
pub const HAS_B: u32 = 4;
/// `norm_add` flag: B is RMS-normed.
pub const NORM_B: u32 = 8;
/// `norm_add` flag: B's norm has a weight.
pub const WEIGHT_B: u32 = 16;

/// Whole-row RMS norms of A and B (each optional), their sum and a scale of it
/// (`crate::fusion::NormAdd`). Bindings: A, B, A's weight, B's weight, output.
pub fn norm_add() -> KernelSpec {
    KernelSpec::new("norm_add", &["common", "norm_add"], 5, push_size::<NormAddParams>())
}

/// Push constants of `glu_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct GluQ8Params {
    /// Elements / 4.
    pub n_words: u32,
    pub group: u32,
    pub scale_off: u32,
    /// Words per half of a side-by-side gate | up row (A and B bound to one buffer), or 0.
    pub ab_words: u32,
    /// Partial-product planes bound as A and as B (1: the tensor itself), and the vec4s
    /// between them (split-K matmuls whose reductions this kernel does).
    pub a_parts: u32,
    pub a_stride: u32,
    pub b_parts: u32,
    pub b_stride: u32,
    /// vec4s per row of Y.
    pub row_words: u32,
    /// B read as a column slice of a wider tensor (0: B is the tensor itself): vec4s per row
    /// of that tensor and the slice's first vec4 in each period.
    pub b_row_words: u32,
    pub b_off_words: u32,
    /// With the norm form: vec4s per RMS-norm group of B, and the norm's epsilon.
    pub b_norm_words: u32,
    pub b_norm_eps: f32,
    /// B's slice: vec4s of it per period, vec4s per period.
    pub b_len_words: u32,
    pub b_period_words: u32,
    /// A read as a column slice (0: A is the tensor itself): as B's fields.
    pub a_row_words: u32,
    pub a_len_words: u32,
    pub a_period_words: u32,
    pub a_off_words: u32,
}

/// Gated activation + int8 quantization of the result (or its f16 rounding, `out`); with
/// `up_norm`, the up operand is RMS-normed over groups and weighted first
/// ([`crate::fusion::UpNorm`]). Bindings: gate, up, output, quants, scales (unused for f16),
/// and the norm's weight.
pub fn glu_q8(act: Activation, out: QuantOut, up_norm: bool) -> KernelSpec {
    let (name, body) = elt_body(Elt::Glu(act));
    let (part, f, elem, suffix) = out.parts();
    let (norm, bindings, decl) = if up_norm {
        let decl = "@group(0) @binding(5) var<storage, read> NW: array<vec4<f32>>;\n\
                    fn norm_weight(i: u32) -> vec4<f32> { return NW[i]; }";
        (".norm", 6, decl)
    } else {
        ("", 5, "fn norm_weight(i: u32) -> vec4<f32> { return vec4<f32>(1.0); }")
    };
    KernelSpec::new(
        format!("{name}_q8{suffix}{norm}"),
        &["common", "q8_block", part, "glu_q8"],
        bindings,
        push_size::<GluQ8Params>(),
    )
    .define("OP", body)
    .define("QUANT", f)
    .define("Q_ELEM", elem)
    .define("NORM", up_norm)
    .define("NORM_DECL", decl)
}

/// Push constants of `qk_rope.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct QkRopeParams {
    pub rope: crate::kernels::RopeGpu,
    pub dk: u32,
    pub dv: u32,
    pub n_head: u32,
    pub n_kv_head: u32,
    pub n_tokens: u32,
    /// 0: no norm, 1: norm, 2: norm times a weight.
    pub q_norm: u32,
    pub k_norm: u32,
    pub q_eps: f32,
    pub k_eps: f32,
    pub write_kv: u32,
    pub page_size: u32,
    pub pos_off: u32,
    pub pt_off: u32,
    pub kw: u32,
    pub vw: u32,
    /// Partial-product planes of Q, K and V, a byte each (1: the tensor itself; more: a
    /// split-K matmul whose reduction this kernel does).
    pub parts: u32,
    /// 1: V is RMS-normed per head (no weight) as it is appended.
    pub v_norm: u32,
    pub v_eps: f32,
    /// Q read in place from a tensor of `n_head` periods of this many columns, each head's
    /// query from column `q_off` of its period (0: Q is its own tensor).
    pub q_period: u32,
    pub q_off: u32,
}

/// Largest head dim `qk_rope.wgsl` takes (its workgroup arrays).
pub const QK_ROPE_MAX_DIM: u32 = 512;

/// Q/K per-head norms + RoPE + KV append for a cache type. Bindings: q in/out, k in/out,
/// v in, K cache, V cache, step, frequency factors, q_norm weight, k_norm weight.
pub fn qk_rope(dtype: KvDType, max_dim: u32) -> KernelSpec {
    let name = format!("qk_rope.{dtype:?}").to_lowercase();
    let spec = KernelSpec::new(name, &["common", "tree_sum", "rope_math", "qk_rope"], 11, push_size::<QkRopeParams>())
        .define("MAXD", max_dim.next_power_of_two().max(64));
    kv_defines(spec, dtype)
}

/// Push constants of `attn_combine_q8.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct AttnCombineQ8Params {
    pub n_tokens: u32,
    pub n_head: u32,
    pub dv: u32,
    pub n_split: u32,
    pub window: u32,
    pub pos_off: u32,
    pub group: u32,
    pub scale_off: u32,
}

/// Merge of split attention partials + int8 quantization of the output rows. Bindings:
/// partials, output, step, quants, scales.
pub fn attn_combine_q8() -> KernelSpec {
    KernelSpec::new(
        "attention_combine_q8",
        &["common", "q8_block", "q8_store", "attn_combine_q8"],
        5,
        push_size::<AttnCombineQ8Params>(),
    )
}

/// Push constants of `topk.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct TopKParams {
    pub n_in: u32,
    pub n_rows: u32,
    pub k: u32,
    pub parts: u32,
}

/// Largest k of the device top-k (larger requests read back whole logits rows).
pub const MAX_DEVICE_TOP_K: usize = 64;

/// Inputs per invocation of the first top-k pass (chunks of `TOPK_CHUNK` logits).
pub const TOPK_E1: u32 = 8;
/// Logits per workgroup of the first top-k pass.
pub const TOPK_CHUNK: u32 = TOPK_E1 * 256;

/// A top-k pass: the first over logits rows (`first`), the second over `e · 256` chunk
/// winners per row. Bindings: logits, candidates in, candidates out.
pub fn top_k(first: bool, e: u32) -> KernelSpec {
    let (name, load) = if first {
        ("topk.logits", "    return vec2<u32>(bitcast<u32>(X[row * pc.n_in + i]), i);")
    } else {
        ("topk.merge", "    return XC[row * pc.n_in + i];")
    };
    KernelSpec::new(name, &["common", "topk"], 3, push_size::<TopKParams>()).define("E", e).define("LOAD", load)
}

/// The sampler adjustments applied to the output rows before the top-k passes (bindings:
/// logits, adjustments, unused; push constants [`TopKParams`]: row width, rows, entries per
/// row, words of counts).
pub fn logit_adjust() -> KernelSpec {
    KernelSpec::new("logit_adjust", &["common", "logit_adjust"], 3, push_size::<TopKParams>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::compile_wgsl;

    #[test]
    fn fused_shaders_compile() {
        let mut specs = vec![attn_combine_q8()];
        for out in [QuantOut::Int8, QuantOut::F16] {
            specs.push(norm_q8(out));
            for act in [Activation::Silu, Activation::GeluTanh, Activation::GeluTanhExact, Activation::SwigluOai] {
                specs.push(glu_q8(act, out, false));
                specs.push(glu_q8(act, out, true));
            }
        }
        for dt in [KvDType::F16, KvDType::F32] {
            specs.push(qk_rope(dt, 128));
            specs.push(qk_rope(dt, QK_ROPE_MAX_DIM));
        }
        specs.push(top_k(true, TOPK_E1));
        specs.push(top_k(false, 19));
        specs.push(logit_adjust());
        specs.extend((1..=3).map(crate::plan::canvas_sample));
        for s in specs {
            let src = s.wgsl().unwrap();
            compile_wgsl(&s.name, &src, false).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}
