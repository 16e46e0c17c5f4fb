//! Qwen3.5 / 3.6 hybrid shapes for `infr synth`: tensors and keys of the gated DeltaNet and
//! output-gated attention layers, as llama.cpp's `qwen35` / `qwen35moe` loaders read them.

use infr_gguf::{Metadata, Value, ValueType};

use super::Shape;

/// The DeltaNet side of a hybrid shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HybridShape {
    /// Query/key heads of the DeltaNet layers (`ssm.group_count`).
    pub k_heads: usize,
    /// Value heads (`ssm.time_step_rank`).
    pub v_heads: usize,
    /// Head dimension (`ssm.state_size`).
    pub head_dim: usize,
    /// Convolution taps.
    pub conv: usize,
    /// Every `interval`-th layer is full attention.
    pub interval: usize,
    /// Rotated dimensions of the attention heads.
    pub rope_dims: usize,
    /// Shared expert width (mixture-of-experts shapes).
    pub shared_ff: usize,
}

/// The common part of the Qwen3.5 shapes.
#[allow(clippy::too_many_arguments)]
const fn qwen35(
    name: &'static str,
    model_name: &'static str,
    (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff): (usize, usize, usize, usize, usize, usize),
    (n_vocab, tied, n_ctx): (usize, bool, usize),
    experts: Option<(usize, usize)>,
    hybrid: HybridShape,
) -> Shape {
    Shape {
        name,
        arch: if experts.is_some() { "qwen35moe" } else { "qwen35" },
        model_name,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        tied,
        rope_base: 1e7,
        rms_eps: 1e-6,
        n_ctx,
        experts,
        hybrid: Some(hybrid),
        gemma4: None,
    }
}

const REAL: HybridShape =
    HybridShape { k_heads: 16, v_heads: 32, head_dim: 128, conv: 4, interval: 4, rope_dims: 64, shared_ff: 0 };
const TINY: HybridShape =
    HybridShape { k_heads: 2, v_heads: 4, head_dim: 64, conv: 4, interval: 4, rope_dims: 16, shared_ff: 0 };

/// Qwen3.5-9B (Hugging Face config of `Qwen/Qwen3.5-9B`, text model).
pub const QWEN35_9B: Shape =
    qwen35("qwen3.5-9b", "Qwen3.5 9B", (4096, 32, 16, 4, 256, 12288), (248320, false, 262144), None, REAL);
/// Qwen3.6-35B-A3B: 256 experts of 512, 8 per token, one gated shared expert of 512.
pub const QWEN36_35B_A3B: Shape = qwen35(
    "qwen3.6-35b-a3b",
    "Qwen3.6 35B A3B",
    (2048, 40, 16, 2, 256, 512),
    (248320, false, 262144),
    Some((256, 8)),
    HybridShape { shared_ff: 512, ..REAL },
);
/// A tiny dense hybrid for tests.
pub const TINY_QWEN35: Shape =
    qwen35("tiny-qwen35", "tiny Qwen3.5", (256, 4, 4, 2, 64, 512), (512, true, 4096), None, TINY);
/// A tiny mixture-of-experts hybrid for tests.
pub const TINY_QWEN35MOE: Shape = qwen35(
    "tiny-qwen35moe",
    "tiny Qwen3.5 MoE",
    (256, 4, 4, 2, 64, 256),
    (512, false, 4096),
    Some((8, 2)),
    HybridShape { shared_ff: 256, ..TINY },
);

/// Layer `il`'s tensors (names without the `blk.{il}.` prefix) and ggml dims.
pub(super) fn layer_tensors(s: &Shape, hy: &HybridShape, il: usize) -> Vec<(&'static str, Vec<u64>)> {
    let e = s.n_embd as u64;
    let mut t = vec![("attn_norm.weight", vec![e]), ("post_attention_norm.weight", vec![e])];
    if (il + 1) % hy.interval != 0 {
        let (d, k, v) = (hy.head_dim as u64, hy.k_heads as u64, hy.v_heads as u64);
        let conv = (2 * k + v) * d;
        t.extend([
            ("attn_qkv.weight", vec![e, conv]),
            ("attn_gate.weight", vec![e, v * d]),
            ("ssm_conv1d.weight", vec![hy.conv as u64, conv]),
            ("ssm_dt.bias", vec![v]),
            ("ssm_a", vec![v]),
            ("ssm_beta.weight", vec![e, v]),
            ("ssm_alpha.weight", vec![e, v]),
            ("ssm_norm.weight", vec![d]),
            ("ssm_out.weight", vec![v * d, e]),
        ]);
    } else {
        let hd = s.head_dim as u64;
        let (q, kv) = (s.n_head as u64 * hd, s.n_head_kv as u64 * hd);
        t.extend([
            ("attn_q.weight", vec![e, 2 * q]),
            ("attn_k.weight", vec![e, kv]),
            ("attn_v.weight", vec![e, kv]),
            ("attn_output.weight", vec![q, e]),
            ("attn_q_norm.weight", vec![hd]),
            ("attn_k_norm.weight", vec![hd]),
        ]);
    }
    let ff = s.n_ff as u64;
    match s.experts {
        Some((ne, _)) => {
            let (ne, sf) = (ne as u64, hy.shared_ff as u64);
            t.push(("ffn_gate_inp.weight", vec![e, ne]));
            t.extend(super::expert_ffn(e, ff, ne));
            t.extend([
                ("ffn_gate_inp_shexp.weight", vec![e]),
                ("ffn_gate_shexp.weight", vec![e, sf]),
                ("ffn_up_shexp.weight", vec![e, sf]),
                ("ffn_down_shexp.weight", vec![sf, e]),
            ]);
        }
        None => t.extend(super::dense_ffn(e, ff)),
    }
    t
}

/// The hybrid's keys: DeltaNet widths, layer pattern, partial M-RoPE.
pub(super) fn metadata(m: &mut Metadata, s: &Shape, hy: &HybridShape) {
    let a = s.arch;
    let u = |v: usize| Value::U32(v as u32);
    m.insert(format!("{a}.ssm.conv_kernel"), u(hy.conv));
    m.insert(format!("{a}.ssm.state_size"), u(hy.head_dim));
    m.insert(format!("{a}.ssm.group_count"), u(hy.k_heads));
    m.insert(format!("{a}.ssm.time_step_rank"), u(hy.v_heads));
    m.insert(format!("{a}.ssm.inner_size"), u(hy.v_heads * hy.head_dim));
    m.insert(format!("{a}.full_attention_interval"), u(hy.interval));
    m.insert(format!("{a}.rope.dimension_count"), u(hy.rope_dims));
    // Text positions are equal in every section; llama.cpp requires four that sum to n_rot/2.
    let half = hy.rope_dims / 2;
    let sections = [half - 2 * (half / 3), half / 3, half / 3, 0].map(|v| Value::I32(v as i32));
    m.insert(format!("{a}.rope.dimension_sections"), Value::Array(ValueType::I32, sections.to_vec()));
    if s.experts.is_some() {
        m.insert(format!("{a}.expert_shared_feed_forward_length"), u(hy.shared_ff));
    }
}
