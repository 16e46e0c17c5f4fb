//! Gemma 4 shapes for `infr synth`: sliding and global layers with their own head sizes and
//! KV heads, proportional RoPE on the global layers, per-layer embeddings and KV-shared
//! layers (E variants), and the dense + routed FFN of the MoE variant, with the keys and
//! tensor names llama.cpp's `gemma4` loader reads.

use infr_gguf::{Metadata, Value, ValueType};

use super::Shape;

/// What Gemma 4 adds to a [`Shape`] (whose `head_dim` / `n_head_kv` are the global layers'
/// head size and the sliding layers' KV heads).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemma4Shape {
    /// Head size of the sliding layers.
    pub swa_head_dim: usize,
    /// KV heads of the global layers.
    pub global_kv_heads: usize,
    /// Sliding window.
    pub window: usize,
    /// Every `period`-th layer is global.
    pub period: usize,
    /// Trailing layers that read an earlier layer's KV.
    pub shared_kv: usize,
    /// Per-layer embedding width (0: none).
    pub ple: usize,
    /// Global layers have no `attn_v` (V = K).
    pub k_eq_v: bool,
    /// DiffusionGemma (`diffusion-gemma`) with canvases of this many tokens: the decoder's
    /// self-conditioning block and layer scalars, and the diffusion keys.
    pub diffusion: Option<usize>,
}

/// The common part of the Gemma 4 shapes (tied output, 262144 tokens, soft-capped logits).
const fn gemma4(
    name: &'static str,
    model_name: &'static str,
    (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff): (usize, usize, usize, usize, usize, usize),
    (n_vocab, n_ctx): (usize, usize),
    experts: Option<(usize, usize)>,
    g: Gemma4Shape,
) -> Shape {
    Shape {
        name,
        arch: "gemma4",
        model_name,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        tied: true,
        rope_base: 1e6,
        rms_eps: 1e-6,
        n_ctx,
        experts,
        hybrid: None,
        gemma4: Some(g),
    }
}

/// Gemma 4 31B (dense): 60 layers, 5 sliding to 1 global, window 1024.
pub const GEMMA4_31B: Shape = gemma4(
    "gemma4-31b",
    "Gemma 4 31B",
    (5376, 60, 32, 16, 512, 21504),
    (262144, 262144),
    None,
    Gemma4Shape {
        swa_head_dim: 256,
        global_kv_heads: 4,
        window: 1024,
        period: 6,
        shared_kv: 0,
        ple: 0,
        k_eq_v: true,
        diffusion: None,
    },
);
/// Gemma 4 26B-A4B: 30 layers, each a dense FFN of 2112 plus 8 of 128 experts of 704.
pub const GEMMA4_26B_A4B: Shape = gemma4(
    "gemma4-26b-a4b",
    "Gemma 4 26B A4B",
    (2816, 30, 16, 8, 512, 704),
    (262144, 262144),
    Some((128, 8)),
    Gemma4Shape {
        swa_head_dim: 256,
        global_kv_heads: 2,
        window: 1024,
        period: 6,
        shared_kv: 0,
        ple: 0,
        k_eq_v: true,
        diffusion: None,
    },
);
/// Gemma 4 E4B: 42 layers, the last 18 sharing KV, per-layer embeddings of 256.
pub const GEMMA4_E4B: Shape = gemma4(
    "gemma4-e4b",
    "Gemma 4 E4B",
    (2560, 42, 8, 2, 512, 10240),
    (262144, 131072),
    None,
    Gemma4Shape {
        swa_head_dim: 256,
        global_kv_heads: 2,
        window: 512,
        period: 6,
        shared_kv: 18,
        ple: 256,
        k_eq_v: false,
        diffusion: None,
    },
);
/// A tiny E-style model for tests (6 layers, 2 KV-shared, PLE of 32).
pub const TINY_GEMMA4: Shape = gemma4(
    "tiny-gemma4",
    "tiny Gemma 4",
    (256, 6, 4, 2, 128, 512),
    (512, 4096),
    None,
    Gemma4Shape {
        swa_head_dim: 64,
        global_kv_heads: 1,
        window: 16,
        period: 2,
        shared_kv: 2,
        ple: 32,
        k_eq_v: true,
        diffusion: None,
    },
);
/// A tiny MoE model for tests.
pub const TINY_GEMMA4_MOE: Shape = gemma4(
    "tiny-gemma4-moe",
    "tiny Gemma 4 MoE",
    (256, 4, 4, 2, 128, 256),
    (512, 4096),
    Some((8, 2)),
    Gemma4Shape {
        swa_head_dim: 64,
        global_kv_heads: 1,
        window: 16,
        period: 2,
        shared_kv: 0,
        ple: 0,
        k_eq_v: true,
        diffusion: None,
    },
);

/// DiffusionGemma 26B-A4B: the Gemma 4 26B-A4B stack as encoder and decoder, canvases of 256.
pub const DIFFUSIONGEMMA_26B_A4B: Shape =
    diffusion("diffusiongemma-26b-a4b", "DiffusionGemma 26B A4B", GEMMA4_26B_A4B, 256);
/// A tiny DiffusionGemma for tests (the tiny MoE stack, canvases of 32).
pub const TINY_DIFFUSIONGEMMA: Shape = diffusion("tiny-diffusiongemma", "tiny DiffusionGemma", TINY_GEMMA4_MOE, 32);

/// `base` as DiffusionGemma with canvases of `canvas` tokens.
const fn diffusion(name: &'static str, model_name: &'static str, base: Shape, canvas: usize) -> Shape {
    let g = match base.gemma4 {
        Some(g) => g,
        None => panic!("a Gemma 4 base shape"),
    };
    Shape {
        name,
        arch: "diffusion-gemma",
        model_name,
        gemma4: Some(Gemma4Shape { diffusion: Some(canvas), ..g }),
        ..base
    }
}

/// Width of the dense FFN of the MoE shape beside its experts (`feed_forward_length`).
fn dense_ff(s: &Shape) -> usize {
    match (s.name, s.experts) {
        ("gemma4-26b-a4b" | "diffusiongemma-26b-a4b", _) => 2112,
        (_, Some(_)) => 2 * s.n_ff,
        _ => s.n_ff,
    }
}

fn is_global(g: &Gemma4Shape, il: usize) -> bool {
    (il + 1) % g.period == 0
}

/// The model-level tensors besides the embedding and output norm.
pub(super) fn global_tensors(s: &Shape, g: &Gemma4Shape) -> Vec<(String, Vec<u64>)> {
    let (e, all) = (s.n_embd as u64, (g.ple * s.n_layer) as u64);
    let mut t = vec![("rope_freqs.weight".to_owned(), vec![s.head_dim as u64 / 2])];
    if g.ple > 0 {
        t.push(("per_layer_token_embd.weight".into(), vec![all, s.n_vocab as u64]));
        t.push(("per_layer_model_proj.weight".into(), vec![e, all]));
        t.push(("per_layer_proj_norm.weight".into(), vec![g.ple as u64]));
    }
    if g.diffusion.is_some() {
        let ff = dense_ff(s) as u64;
        t.push(("self_cond.norm.weight".into(), vec![e]));
        t.push(("self_cond.ffn_gate.weight".into(), vec![e, ff]));
        t.push(("self_cond.ffn_up.weight".into(), vec![e, ff]));
        t.push(("self_cond.ffn_down.weight".into(), vec![ff, e]));
        t.extend((0..s.n_layer).map(|il| (format!("dec.blk.{il}.layer_output_scale.weight"), vec![1])));
    }
    t
}

/// Layer `il`'s tensors (names without the `blk.{il}.` prefix) and ggml dims.
pub(super) fn layer_tensors(s: &Shape, g: &Gemma4Shape, il: usize) -> Vec<(&'static str, Vec<u64>)> {
    let e = s.n_embd as u64;
    let global = is_global(g, il);
    let (hd, kvh) = if global { (s.head_dim, g.global_kv_heads) } else { (g.swa_head_dim, s.n_head_kv) };
    let (q, kv, hd) = ((s.n_head * hd) as u64, (kvh * hd) as u64, hd as u64);
    let has_kv = il < s.n_layer - g.shared_kv;
    let mut t = vec![("attn_norm.weight", vec![e]), ("attn_q.weight", vec![e, q])];
    if has_kv {
        t.push(("attn_k.weight", vec![e, kv]));
        if !(global && g.k_eq_v) {
            t.push(("attn_v.weight", vec![e, kv]));
        }
        t.push(("attn_k_norm.weight", vec![hd]));
    }
    let ff = dense_ff(s) as u64;
    t.extend([
        ("attn_output.weight", vec![q, e]),
        ("attn_q_norm.weight", vec![hd]),
        ("post_attention_norm.weight", vec![e]),
        ("layer_output_scale.weight", vec![1]),
        ("ffn_norm.weight", vec![e]),
        ("post_ffw_norm.weight", vec![e]),
    ]);
    t.extend(super::dense_ffn(e, ff));
    if let Some((ne, _)) = s.experts {
        let (ne, fe) = (ne as u64, s.n_ff as u64);
        t.extend([
            ("ffn_gate_inp.weight", vec![e, ne]),
            ("ffn_gate_inp.scale", vec![e]),
            ("pre_ffw_norm_2.weight", vec![e]),
            ("post_ffw_norm_1.weight", vec![e]),
            ("post_ffw_norm_2.weight", vec![e]),
            ("ffn_down_exps.scale", vec![ne]),
        ]);
        t.extend(super::expert_ffn(e, fe, ne));
    }
    if g.ple > 0 {
        let p = g.ple as u64;
        t.extend([("inp_gate.weight", vec![e, p]), ("proj.weight", vec![p, e]), ("post_norm.weight", vec![e])]);
    }
    t
}

/// Gemma 4's keys.
pub(super) fn metadata(m: &mut Metadata, s: &Shape, g: &Gemma4Shape) {
    let a = s.arch;
    let u = |v: usize| Value::U32(v as u32);
    let layers = 0..s.n_layer;
    let kv: Vec<Value> = layers
        .clone()
        .map(|il| Value::I32(if is_global(g, il) { g.global_kv_heads } else { s.n_head_kv } as i32))
        .collect();
    m.insert(format!("{a}.attention.head_count_kv"), Value::Array(ValueType::I32, kv));
    let swa: Vec<Value> = layers.map(|il| Value::Bool(!is_global(g, il))).collect();
    m.insert(format!("{a}.attention.sliding_window_pattern"), Value::Array(ValueType::Bool, swa));
    m.insert(format!("{a}.attention.sliding_window"), u(g.window));
    m.insert(format!("{a}.attention.key_length_swa"), u(g.swa_head_dim));
    m.insert(format!("{a}.attention.value_length_swa"), u(g.swa_head_dim));
    m.insert(format!("{a}.rope.dimension_count_swa"), u(g.swa_head_dim));
    m.insert(format!("{a}.rope.freq_base_swa"), Value::F32(1e4));
    m.insert(format!("{a}.attention.shared_kv_layers"), u(g.shared_kv));
    m.insert(format!("{a}.embedding_length_per_layer_input"), u(g.ple));
    m.insert(format!("{a}.final_logit_softcapping"), Value::F32(30.0));
    m.insert(format!("{a}.feed_forward_length"), u(dense_ff(s)));
    if let Some(canvas) = g.diffusion {
        // transformers' generation defaults for DiffusionGemma.
        m.insert(format!("{a}.diffusion.canvas_length"), u(canvas));
        m.insert(format!("{a}.diffusion.max_denoising_steps"), u(48));
        m.insert(format!("{a}.diffusion.t_min"), Value::F32(0.4));
        m.insert(format!("{a}.diffusion.t_max"), Value::F32(0.8));
        m.insert(format!("{a}.diffusion.entropy_bound"), Value::F32(0.1));
        m.insert(format!("{a}.diffusion.stability_threshold"), u(1));
        m.insert(format!("{a}.diffusion.confidence_threshold"), Value::F32(0.005));
    }
}

/// Values of `rope_freqs.weight`: a quarter of the pairs rotate normally, the rest (divided
/// by 1e30) barely move ("proportional" RoPE with partial_rotary_factor 0.25).
pub(super) fn rope_freqs(n: usize) -> Vec<f32> {
    (0..n).map(|i| if i < n / 4 { 1.0 } else { 1e30 }).collect()
}
