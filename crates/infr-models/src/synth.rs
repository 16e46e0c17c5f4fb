//! Random-weight GGUF files with the shapes and metadata of real models (`infr synth`), for
//! speed tests of infr and llama.cpp without downloading real weights.
//!
//! The files load in both engines: standard tensor names and shapes, the hyper-parameter keys
//! llama.cpp reads, a valid byte-level BPE vocabulary (`gpt2` model, `qwen2` / `llama-bpe`
//! pre-tokenizer) and the per-tensor type mix of llama.cpp's quantizer
//! (`llama_tensor_get_type` in `src/llama-quant.cpp`). Weights are random but numerically sane:
//! quant nibbles / int8 values are random bytes and the block scales are patched so that the
//! dequantized weights have a spread of about 0.02; norm weights are 1 ± 0.01.
//!
//! Data is generated and written chunk by chunk through [`GgufStreamWriter`], so an 8B model
//! never sits in memory. The output is a deterministic function of (shape, quant, layers, seed).
//!
//! The shapes, from each model's Hugging Face `config.json` (`head_dim` = key/value length):
//!
//! | shape       | arch  | n_embd | layers | heads | kv heads | head_dim | n_ff  | vocab  | output | rope base | rms eps | context |
//! |-------------|-------|-------:|-------:|------:|---------:|---------:|------:|-------:|--------|----------:|--------:|--------:|
//! | qwen3-0.6b  | qwen3 |   1024 |     28 |    16 |        8 |      128 |  3072 | 151936 | tied   |       1e6 |    1e-6 |   40960 |
//! | qwen3-1.7b  | qwen3 |   2048 |     28 |    16 |        8 |      128 |  6144 | 151936 | tied   |       1e6 |    1e-6 |   40960 |
//! | qwen3-4b    | qwen3 |   2560 |     36 |    32 |        8 |      128 |  9728 | 151936 | tied   |       1e6 |    1e-6 |   40960 |
//! | qwen3-8b    | qwen3 |   4096 |     36 |    32 |        8 |      128 | 12288 | 151936 | untied |       1e6 |    1e-6 |   40960 |
//! | qwen3-14b   | qwen3 |   5120 |     40 |    40 |        8 |      128 | 17408 | 151936 | untied |       1e6 |    1e-6 |   40960 |
//! | llama3-8b   | llama |   4096 |     32 |    32 |        8 |      128 | 14336 | 128256 | untied |       5e5 |    1e-5 |    8192 |
//! | tiny-qwen3  | qwen3 |    256 |      2 |     8 |        4 |       64 |   512 |    512 | tied   |       1e6 |    1e-6 |    4096 |
//! | tiny-llama3 | llama |    256 |      2 |     4 |        2 |       64 |   512 |    512 | untied |       5e5 |    1e-5 |    4096 |
//!
//! Mixture-of-experts shapes (`n_ff` = one expert's width; experts / used per token):
//!
//! | shape         | arch     | n_embd | layers | heads | kv heads | head_dim | n_ff | experts | vocab  | output | rope base | context |
//! |---------------|----------|-------:|-------:|------:|---------:|---------:|-----:|--------:|-------:|--------|----------:|--------:|
//! | qwen3-30b-a3b | qwen3moe |   2048 |     48 |    32 |        4 |      128 |  768 |   128/8 | 151936 | untied |       1e6 |   40960 |
//! | gpt-oss-20b   | gpt-oss  |   2880 |     24 |    64 |        8 |       64 | 2880 |    32/4 | 201088 | untied |    1.5e5 |  131072 |
//! | tiny-qwen3moe | qwen3moe |    256 |      2 |     8 |        4 |       64 |  256 |     8/2 |    512 | untied |       1e6 |    4096 |
//! | tiny-gpt-oss  | gpt-oss  |    256 |      2 |     4 |        2 |       64 |  256 |     8/4 |    512 | untied |    1.5e5 |    4096 |
//!
//! Qwen3.5 / 3.6 hybrids (every `interval`-th layer gated attention, the others gated DeltaNet
//! with `k`/`v` heads of `d` dims and a 4-tap conv; attention rotates 64 of 256 head dims):
//!
//! | shape           | arch      | n_embd | layers | heads | kv heads | head_dim | n_ff  | DeltaNet k/v x d | experts (+shared) | vocab  | output |
//! |-----------------|-----------|-------:|-------:|------:|---------:|---------:|------:|-----------------:|------------------:|-------:|--------|
//! | qwen3.5-9b      | qwen35    |   4096 |     32 |    16 |        4 |      256 | 12288 |       16/32 x 128 |                 - | 248320 | untied |
//! | qwen3.6-35b-a3b | qwen35moe |   2048 |     40 |    16 |        2 |      256 |   512 |       16/32 x 128 |     256/8 (+512) | 248320 | untied |
//! | tiny-qwen35     | qwen35    |    256 |      4 |     4 |        2 |       64 |   512 |         2/4 x 64 |                 - |    512 | tied   |
//! | tiny-qwen35moe  | qwen35moe |    256 |      4 |     4 |        2 |       64 |   256 |         2/4 x 64 |       8/2 (+256) |    512 | untied |
//!
//! (rope base 1e7, rms eps 1e-6, context 262144; tiny shapes 4096.)
//!
//! Gemma 4 (every 6th layer global with its own head size and KV heads, the others sliding;
//! global layers rotate a quarter of their dims; tied output; soft-capped logits):
//!
//! | shape           | n_embd | layers | heads | KV heads sliding/global | head dim sliding/global | n_ff  | window | extras |
//! |-----------------|-------:|-------:|------:|------------------------:|------------------------:|------:|-------:|--------|
//! | gemma4-31b      |   5376 |     60 |    32 |                  16 / 4 |               256 / 512 | 21504 |   1024 | V = K on global layers |
//! | gemma4-26b-a4b  |   2816 |     30 |    16 |                   8 / 2 |               256 / 512 |  2112 |   1024 | + 128 experts of 704, 8 per token |
//! | gemma4-e4b      |   2560 |     42 |     8 |                   2 / 2 |               256 / 512 | 10240 |    512 | PLE 256, last 18 layers share KV |
//! | tiny-gemma4     |    256 |      6 |     4 |                   2 / 1 |                64 / 128 |   512 |     16 | PLE 32, 2 shared, V = K |
//! | tiny-gemma4-moe |    256 |      4 |     4 |                   2 / 1 |                64 / 128 |   512 |     16 | + 8 experts of 256, 2 per token |
//!
//! (vocab 262144, from the published GGUF metadata; the global layers' KV heads of the 31B
//! and 26B are not in it and are taken as 4 and 2.) `diffusiongemma-26b-a4b` and
//! `tiny-diffusiongemma` are the 26B-A4B and tiny MoE stacks as DiffusionGemma
//! (`diffusion-gemma`, `testdata/diffusion/README.md`): canvases of 256 and 32 tokens, the
//! self-conditioning block and the decoder's layer scalars.
//!
//! gpt-oss files also carry what llama.cpp requires of that architecture: Q/K/V/O biases,
//! per-head attention sinks, a sliding window of 128 on even layers, YaRN (factor 32 over
//! 4096 positions), a biased router and biased experts, and its harmony control tokens.
//!
//! The tiny shapes are for tests; their widths are multiples of 256 so that the k-quants apply
//! (and tiny-qwen3's 8 × 64 query width differs from n_embd, as Qwen3's does).

use std::path::{Path, PathBuf};

use infr_gguf::{GgmlType, GgufError, GgufStreamWriter, Metadata, TensorSpec, Value, ValueType};
use infr_quant::blocks::{BlockIQ4_NL, BlockQ2_K, BlockQ3_K, BlockQ4_0, BlockQ4_K, BlockQ5_0, BlockQ6_K, BlockQ8_0};
use infr_quant::float::f32_to_f16;

mod gemma4;
mod hybrid;
mod mix;
mod vocab;

pub use gemma4::Gemma4Shape;
pub use hybrid::HybridShape;
pub use mix::{tensor_type, use_more_bits, MixModel, SynthQuant};

/// Why a synthetic model could not be planned or written.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// A shape name that is not in [`SHAPES`].
    #[error("unknown shape '{name}' (valid: {valid})")]
    UnknownShape {
        /// The name given.
        name: String,
        /// The valid names, comma separated.
        valid: String,
    },
    /// A quantization name that is not a [`SynthQuant`].
    #[error("unknown quantization '{name}' (valid: {valid})")]
    UnknownQuant {
        /// The name given.
        name: String,
        /// The valid names, comma separated.
        valid: String,
    },
    /// A layer count of zero or above what loaders accept.
    #[error("layer count {0} is out of range (1 to 1024)")]
    BadLayers(usize),
    /// Writing the file failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// The hyper-parameters of a model family member.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// Name used on the command line, e.g. `qwen3-8b`.
    pub name: &'static str,
    /// `general.architecture` (`qwen3` or `llama`).
    pub arch: &'static str,
    /// `general.name` of the real model.
    pub model_name: &'static str,
    /// Hidden size.
    pub n_embd: usize,
    /// Decoder layers.
    pub n_layer: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Key and value head size.
    pub head_dim: usize,
    /// FFN intermediate size.
    pub n_ff: usize,
    /// Vocabulary size (rows of `token_embd`).
    pub n_vocab: usize,
    /// Output projection shared with the token embeddings (no `output.weight`).
    pub tied: bool,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RMS norm epsilon.
    pub rms_eps: f32,
    /// Training context length.
    pub n_ctx: usize,
    /// Experts per layer and experts used per token, for mixture-of-experts shapes (`n_ff`
    /// is then one expert's width).
    pub experts: Option<(usize, usize)>,
    /// The gated DeltaNet layers of a Qwen3.5 hybrid.
    pub hybrid: Option<HybridShape>,
    /// Gemma 4's layer kinds, per-layer embeddings and KV sharing.
    pub gemma4: Option<Gemma4Shape>,
}

/// A Qwen3 shape: `(n_embd, layers, heads, kv heads, head_dim, n_ff)`, `(vocab, tied, context)`.
const fn qwen3(
    name: &'static str,
    model_name: &'static str,
    (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff): (usize, usize, usize, usize, usize, usize),
    (n_vocab, tied, n_ctx): (usize, bool, usize),
) -> Shape {
    Shape {
        name,
        arch: "qwen3",
        model_name,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        tied,
        rope_base: 1e6,
        rms_eps: 1e-6,
        n_ctx,
        experts: None,
        hybrid: None,
        gemma4: None,
    }
}

/// A Qwen3-MoE shape: a Qwen3 shape whose FFNs are `experts` of width `n_ff`.
const fn qwen3moe(shape: Shape, experts: (usize, usize)) -> Shape {
    Shape { arch: "qwen3moe", experts: Some(experts), ..shape }
}

/// A gpt-oss shape: `(n_embd, layers, heads, kv heads, head_dim, expert width)`,
/// `(experts, used, vocab, context)`.
const fn gpt_oss(
    name: &'static str,
    model_name: &'static str,
    (n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff): (usize, usize, usize, usize, usize, usize),
    (n_expert, n_used, n_vocab, n_ctx): (usize, usize, usize, usize),
) -> Shape {
    Shape {
        name,
        arch: "gpt-oss",
        model_name,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim,
        n_ff,
        n_vocab,
        tied: false,
        rope_base: 150000.0,
        rms_eps: 1e-5,
        n_ctx,
        experts: Some((n_expert, n_used)),
        hybrid: None,
        gemma4: None,
    }
}

/// A Llama 3 shape: `(n_embd, layers, heads, kv heads, n_ff)`, `(vocab, context)`.
const fn llama3(
    name: &'static str,
    model_name: &'static str,
    dims: (usize, usize, usize, usize, usize),
    ctx: (usize, usize),
) -> Shape {
    let (n_embd, n_layer, n_head, n_head_kv, n_ff) = dims;
    Shape {
        name,
        arch: "llama",
        model_name,
        n_embd,
        n_layer,
        n_head,
        n_head_kv,
        head_dim: n_embd / n_head,
        n_ff,
        n_vocab: ctx.0,
        tied: false,
        rope_base: 5e5,
        rms_eps: 1e-5,
        n_ctx: ctx.1,
        experts: None,
        hybrid: None,
        gemma4: None,
    }
}

/// Every shape `infr synth` knows (see the table in the module documentation).
pub const SHAPES: &[Shape] = &[
    qwen3("qwen3-0.6b", "Qwen3 0.6B", (1024, 28, 16, 8, 128, 3072), (151936, true, 40960)),
    qwen3("qwen3-1.7b", "Qwen3 1.7B", (2048, 28, 16, 8, 128, 6144), (151936, true, 40960)),
    qwen3("qwen3-4b", "Qwen3 4B", (2560, 36, 32, 8, 128, 9728), (151936, true, 40960)),
    qwen3("qwen3-8b", "Qwen3 8B", (4096, 36, 32, 8, 128, 12288), (151936, false, 40960)),
    qwen3("qwen3-14b", "Qwen3 14B", (5120, 40, 40, 8, 128, 17408), (151936, false, 40960)),
    llama3("llama3-8b", "Meta Llama 3 8B", (4096, 32, 32, 8, 14336), (128256, 8192)),
    qwen3("tiny-qwen3", "tiny Qwen3", (256, 2, 8, 4, 64, 512), (512, true, 4096)),
    llama3("tiny-llama3", "tiny Llama 3", (256, 2, 4, 2, 512), (512, 4096)),
    qwen3moe(qwen3("qwen3-30b-a3b", "Qwen3 30B A3B", (2048, 48, 32, 4, 128, 768), (151936, false, 40960)), (128, 8)),
    gpt_oss("gpt-oss-20b", "gpt-oss 20b", (2880, 24, 64, 8, 64, 2880), (32, 4, 201088, 131072)),
    qwen3moe(qwen3("tiny-qwen3moe", "tiny Qwen3 MoE", (256, 2, 8, 4, 64, 256), (512, false, 4096)), (8, 2)),
    gpt_oss("tiny-gpt-oss", "tiny gpt-oss", (256, 2, 4, 2, 64, 256), (8, 4, 512, 4096)),
    hybrid::QWEN35_9B,
    hybrid::QWEN36_35B_A3B,
    hybrid::TINY_QWEN35,
    hybrid::TINY_QWEN35MOE,
    gemma4::GEMMA4_31B,
    gemma4::GEMMA4_26B_A4B,
    gemma4::GEMMA4_E4B,
    gemma4::TINY_GEMMA4,
    gemma4::TINY_GEMMA4_MOE,
    gemma4::DIFFUSIONGEMMA_26B_A4B,
    gemma4::TINY_DIFFUSIONGEMMA,
];

impl Shape {
    /// Look a shape up by name (case-insensitive).
    pub fn by_name(name: &str) -> Result<&'static Shape, SynthError> {
        SHAPES.iter().find(|s| s.name.eq_ignore_ascii_case(name)).ok_or_else(|| SynthError::UnknownShape {
            name: name.to_owned(),
            valid: SHAPES.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
        })
    }
}

/// Everything about a synthetic file except its tensor data.
#[derive(Debug, Clone)]
pub struct SynthPlan {
    /// The shape (with the layer count override applied).
    pub shape: Shape,
    /// The quantization mix.
    pub quant: SynthQuant,
    /// The GGUF metadata.
    pub metadata: Metadata,
    /// The tensor table, in file order.
    pub tensors: Vec<TensorSpec>,
}

impl SynthPlan {
    /// Plan a file of `shape` in `quant`, optionally with another layer count.
    pub fn new(shape: &Shape, quant: SynthQuant, layers: Option<usize>) -> Result<Self, SynthError> {
        let mut shape = shape.clone();
        if let Some(n) = layers {
            if n == 0 || n > 1024 {
                return Err(SynthError::BadLayers(n));
            }
            // Gemma 4's shared-KV layers scale with the depth; the last layer with its own
            // KV must be a global one (llama.cpp picks the donors from there).
            if let Some(g) = shape.gemma4.as_mut() {
                let kv_from = n - n * g.shared_kv / shape.n_layer;
                let kv_from = kv_from.div_ceil(g.period) * g.period;
                g.shared_kv = if g.shared_kv > 0 && kv_from < n { n - kv_from } else { 0 };
            }
            shape.n_layer = n;
        }
        let s = &shape;
        let (e, q, kv) = (s.n_embd as u64, (s.n_head * s.head_dim) as u64, (s.n_head_kv * s.head_dim) as u64);
        let (ff, hd) = (s.n_ff as u64, s.head_dim as u64);
        let mut raw: Vec<(String, Vec<u64>, usize)> = vec![("token_embd.weight".into(), vec![e, s.n_vocab as u64], 0)];
        if let Some(g4) = &s.gemma4 {
            raw.extend(gemma4::global_tensors(s, g4).into_iter().map(|(n, d)| (n, d, 0)));
        }
        for il in 0..s.n_layer {
            if let Some(g4) = &s.gemma4 {
                let layer = gemma4::layer_tensors(s, g4, il);
                raw.extend(layer.into_iter().map(|(n, d)| (format!("blk.{il}.{n}"), d, il)));
                continue;
            }
            if let Some(hy) = &s.hybrid {
                let layer = hybrid::layer_tensors(s, hy, il);
                raw.extend(layer.into_iter().map(|(n, d)| (format!("blk.{il}.{n}"), d, il)));
                continue;
            }
            let mut layer = vec![
                ("attn_norm.weight", vec![e]),
                ("attn_q.weight", vec![e, q]),
                ("attn_k.weight", vec![e, kv]),
                ("attn_v.weight", vec![e, kv]),
                ("attn_output.weight", vec![q, e]),
            ];
            if s.arch.starts_with("qwen3") {
                layer.extend([("attn_q_norm.weight", vec![hd]), ("attn_k_norm.weight", vec![hd])]);
            }
            if s.arch == "gpt-oss" {
                layer.extend([
                    ("attn_q.bias", vec![q]),
                    ("attn_k.bias", vec![kv]),
                    ("attn_v.bias", vec![kv]),
                    ("attn_output.bias", vec![e]),
                    ("attn_sinks.weight", vec![s.n_head as u64]),
                    ("post_attention_norm.weight", vec![e]),
                ]);
            } else {
                layer.push(("ffn_norm.weight", vec![e]));
            }
            match s.experts {
                Some((ne, _)) => {
                    let ne = ne as u64;
                    layer.push(("ffn_gate_inp.weight", vec![e, ne]));
                    layer.extend(expert_ffn(e, ff, ne));
                    if s.arch == "gpt-oss" {
                        layer.extend([
                            ("ffn_gate_inp.bias", vec![ne]),
                            ("ffn_gate_exps.bias", vec![ff, ne]),
                            ("ffn_up_exps.bias", vec![ff, ne]),
                            ("ffn_down_exps.bias", vec![e, ne]),
                        ]);
                    }
                }
                None => layer.extend(dense_ffn(e, ff)),
            }
            raw.extend(layer.into_iter().map(|(n, d)| (format!("blk.{il}.{n}"), d, il)));
        }
        raw.push(("output_norm.weight".into(), vec![e], 0));
        if !s.tied {
            raw.push(("output.weight".into(), vec![e, s.n_vocab as u64], 0));
        }
        let mix = MixModel {
            n_layer: s.n_layer,
            n_gqa: s.n_head / s.n_head_kv.max(1),
            n_expert: s.experts.map_or(0, |(n, _)| n),
            has_output: !s.tied,
        };
        let tensors = raw
            .into_iter()
            .map(|(name, dims, il)| {
                let ty = tensor_type(quant, &name, il, mix, &dims);
                TensorSpec { name, dims, ty }
            })
            .collect();
        let metadata = metadata(s, quant);
        Ok(Self { shape, quant, metadata, tensors })
    }

    /// Number of weights.
    pub fn n_params(&self) -> u64 {
        self.tensors.iter().map(|t| t.dims.iter().product::<u64>()).sum()
    }
}

/// A layer's gated FFN tensors of width `ff` over `e` columns.
fn dense_ffn(e: u64, ff: u64) -> [(&'static str, Vec<u64>); 3] {
    [("ffn_gate.weight", vec![e, ff]), ("ffn_up.weight", vec![e, ff]), ("ffn_down.weight", vec![ff, e])]
}

/// A layer's `ne` routed experts of width `ff` (3-D tensors, without the router).
fn expert_ffn(e: u64, ff: u64, ne: u64) -> [(&'static str, Vec<u64>); 3] {
    [
        ("ffn_gate_exps.weight", vec![e, ff, ne]),
        ("ffn_up_exps.weight", vec![e, ff, ne]),
        ("ffn_down_exps.weight", vec![ff, e, ne]),
    ]
}

fn metadata(s: &Shape, quant: SynthQuant) -> Metadata {
    let mut m = Metadata::new();
    let a = s.arch;
    let u = |v: usize| Value::U32(v as u32);
    m.insert("general.architecture", Value::String(a.into()));
    m.insert("general.name", Value::String(format!("{} (synthetic {})", s.model_name, quant.name())));
    m.insert("general.file_type", Value::U32(quant.file_type()));
    m.insert("general.quantization_version", Value::U32(2));
    m.insert("general.alignment", Value::U32(32));
    m.insert(format!("{a}.context_length"), u(s.n_ctx));
    m.insert(format!("{a}.embedding_length"), u(s.n_embd));
    m.insert(format!("{a}.block_count"), u(s.n_layer));
    m.insert(format!("{a}.feed_forward_length"), u(s.n_ff));
    m.insert(format!("{a}.attention.head_count"), u(s.n_head));
    m.insert(format!("{a}.attention.head_count_kv"), u(s.n_head_kv));
    m.insert(format!("{a}.attention.key_length"), u(s.head_dim));
    m.insert(format!("{a}.attention.value_length"), u(s.head_dim));
    m.insert(format!("{a}.rope.dimension_count"), u(s.head_dim));
    m.insert(format!("{a}.rope.freq_base"), Value::F32(s.rope_base));
    m.insert(format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(s.rms_eps));
    m.insert(format!("{a}.vocab_size"), u(s.n_vocab));
    if let Some((ne, used)) = s.experts {
        m.insert(format!("{a}.expert_count"), u(ne));
        m.insert(format!("{a}.expert_used_count"), u(used));
        m.insert(format!("{a}.expert_feed_forward_length"), u(s.n_ff));
    }
    if let Some(hy) = &s.hybrid {
        hybrid::metadata(&mut m, s, hy);
    }
    if let Some(g4) = &s.gemma4 {
        gemma4::metadata(&mut m, s, g4);
    }
    if a == "gpt-oss" {
        m.insert(format!("{a}.attention.sliding_window"), u(128));
        m.insert(format!("{a}.rope.scaling.type"), Value::String("yarn".into()));
        m.insert(format!("{a}.rope.scaling.factor"), Value::F32(32.0));
        m.insert(format!("{a}.rope.scaling.original_context_length"), u(4096));
    }
    // Control tokens (last ids), bos / eos among them, add_bos as the real GGUFs set it.
    const LLAMA3: &[&str] =
        &["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"];
    const QWEN: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
    // gpt-oss's harmony format (o200k_harmony): bos <|startoftext|>, eos <|return|>.
    const HARMONY: &[&str] = &[
        "<|startoftext|>",
        "<|endoftext|>",
        "<|return|>",
        "<|constrain|>",
        "<|channel|>",
        "<|start|>",
        "<|end|>",
        "<|message|>",
        "<|call|>",
    ];
    // Gemma 4's turn, tool and thought markers (bos <bos>, eos <eos>).
    const GEMMA4: &[&str] = &[
        "<bos>",
        "<eos>",
        "<|turn>",
        "<turn|>",
        "<|tool>",
        "<tool|>",
        "<|tool_call>",
        "<tool_call|>",
        "<|tool_response>",
        "<tool_response|>",
        "<|\"|>",
        "<|channel>",
        "<channel|>",
        "<|think|>",
    ];
    let (pre, controls, bos, eos, add_bos) = match a {
        "llama" => ("llama-bpe", LLAMA3, 0, 4, true),
        "gemma4" | "diffusion-gemma" => ("gpt-4o", GEMMA4, 0, 1, true),
        "gpt-oss" => ("gpt-4o", HARMONY, 0, 2, false),
        _ => ("qwen2", QWEN, 0, 2, false),
    };
    let vocab = vocab::vocabulary(s.n_vocab, controls);
    let first_control = (s.n_vocab - controls.len()) as u32;
    m.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    m.insert("tokenizer.ggml.pre", Value::String(pre.into()));
    m.insert("tokenizer.ggml.tokens", Value::Array(ValueType::String, vocab.tokens));
    m.insert("tokenizer.ggml.token_type", Value::Array(ValueType::I32, vocab.types));
    m.insert("tokenizer.ggml.merges", Value::Array(ValueType::String, vocab.merges));
    m.insert("tokenizer.ggml.bos_token_id", Value::U32(first_control + bos));
    m.insert("tokenizer.ggml.eos_token_id", Value::U32(first_control + eos));
    m.insert("tokenizer.ggml.padding_token_id", Value::U32(first_control));
    m.insert("tokenizer.ggml.add_bos_token", Value::Bool(add_bos));
    m
}

/// What [`write`] produced.
#[derive(Debug, Clone)]
pub struct SynthSummary {
    /// The file written.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Number of tensors.
    pub tensors: usize,
    /// Number of weights.
    pub n_params: u64,
}

/// Write `plan` to `path` with weights drawn from `seed`. `progress(done, total)` is called
/// with byte counts after the header and after every chunk of tensor data.
pub fn write(
    plan: &SynthPlan,
    seed: u64,
    path: impl AsRef<Path>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<SynthSummary, SynthError> {
    let path = path.as_ref();
    let mut w = GgufStreamWriter::create(path, &plan.metadata, &plan.tensors)?;
    let total = w.file_len();
    progress(w.written(), total);
    const CHUNK: usize = 4 << 20;
    let mut buf = vec![0u8; CHUNK];
    for t in &plan.tensors {
        let mut rng = Rng::new(seed, &t.name);
        let info = t.ty.info();
        let step = (CHUNK / info.type_size).max(1) * info.type_size;
        let mut left = t.byte_len()? as usize;
        while left > 0 {
            let n = left.min(step);
            fill(t.ty, &mut buf[..n], &mut rng);
            if t.ty == GgmlType::F32 && t.name == "rope_freqs.weight" {
                for (c, v) in buf[..n].chunks_exact_mut(4).zip(gemma4::rope_freqs(n / 4)) {
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
            // DeltaNet decays `ssm_a` store -exp(A_log): negative, or the state grows
            // without bound.
            if t.ty == GgmlType::F32 && t.name.ends_with(".ssm_a") {
                for c in buf[..n].chunks_exact_mut(4) {
                    let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                    c.copy_from_slice(&(-v).to_le_bytes());
                }
            }
            w.write_data(&buf[..n])?;
            left -= n;
            progress(w.written(), total);
        }
    }
    let bytes = w.finish()?;
    progress(bytes, total);
    Ok(SynthSummary { path: path.to_owned(), bytes, tensors: plan.tensors.len(), n_params: plan.n_params() })
}

/// wyrand: one 64×64→128-bit multiply per 8 random bytes.
struct Rng(u64);

impl Rng {
    /// A stream for one tensor: the seed mixed with an FNV-1a hash of the name, so a tensor's
    /// bytes do not depend on which tensors precede it.
    fn new(seed: u64, name: &str) -> Self {
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
        let mut r = Rng(seed ^ h.rotate_left(17));
        r.next();
        r
    }

    #[inline]
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Target standard deviation of the dequantized weights.
const SIGMA: f32 = 0.02;

/// Fill `buf` (whole blocks of `ty`) with random weights.
fn fill(ty: GgmlType, buf: &mut [u8], rng: &mut Rng) {
    if ty == GgmlType::F32 {
        for c in buf.chunks_exact_mut(4) {
            c.copy_from_slice(&(1.0 + (rng.unit() - 0.5) * SIGMA).to_le_bytes());
        }
        return;
    }
    let f16_lanes = ty == GgmlType::F16;
    let mut word = || {
        let r = rng.next();
        if !f16_lanes {
            return r.to_le_bytes();
        }
        // Random sign and mantissa, exponent 6..=9: |x| in [2^-9, 2^-5), rms about 0.024.
        let exp = ((r >> 10) & 0x0003_0003_0003_0003) + 0x0006_0006_0006_0006;
        ((r & 0x83FF_83FF_83FF_83FF) | (exp << 10)).to_le_bytes()
    };
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&word());
    }
    let tail = chunks.into_remainder();
    let len = tail.len();
    tail.copy_from_slice(&word()[..len]);
    // Block scales: the spread of the raw quants times d gives SIGMA. The random bytes already
    // in a scale field jitter its low mantissa bits (a few percent) so blocks differ.
    let patch = |b: &mut [u8], off: usize, value: f32| {
        let jitter = u16::from_le_bytes([b[off], b[off + 1]]) & 0x1F;
        b[off..off + 2].copy_from_slice(&(f32_to_f16(value) ^ jitter).to_le_bytes());
    };
    match ty {
        // x = d * q, q uniform in -128..=127 (sd 73.9).
        GgmlType::Q8_0 => buf.chunks_exact_mut(BlockQ8_0::SIZE).for_each(|b| patch(b, BlockQ8_0::OFF_D, SIGMA / 73.9)),
        // x = d * (q - 8), q uniform in 0..16 (sd 4.61).
        GgmlType::Q4_0 => buf.chunks_exact_mut(BlockQ4_0::SIZE).for_each(|b| patch(b, BlockQ4_0::OFF_D, SIGMA / 4.61)),
        // x = d * (q - 16), q uniform in 0..32 (sd 9.23).
        GgmlType::Q5_0 => buf.chunks_exact_mut(BlockQ5_0::SIZE).for_each(|b| patch(b, BlockQ5_0::OFF_D, SIGMA / 9.23)),
        // x = d * sc * q - dmin * m with every 6-bit sc = m = 16 (bytes 0..8 = 0x50, 8..12 = 0);
        // dmin = 7.5 d centres q (sd 4.61).
        GgmlType::Q4_K => buf.chunks_exact_mut(BlockQ4_K::SIZE).for_each(|b| {
            let d = SIGMA / (16.0 * 4.61);
            patch(b, BlockQ4_K::OFF_D, d);
            b[BlockQ4_K::OFF_DMIN..BlockQ4_K::OFF_DMIN + 2].copy_from_slice(&f32_to_f16(7.5 * d).to_le_bytes());
            let s = &mut b[BlockQ4_K::OFF_SCALES..BlockQ4_K::OFF_SCALES + 12];
            s[..8].fill(0x50);
            s[8..].fill(0);
        }),
        // {e, qs[16]}: x = kvalue(q) * 2^(e - 128) with the E2M1 values (rms 5.85): e = 120.
        GgmlType::MXFP4 => buf.chunks_exact_mut(17).for_each(|b| b[0] = 120),
        // x = d sc q - dmin m with sc = m = 8 and dmin = 1.5 d: 8 d (q - 1.5), q uniform in
        // 0..4 (sd 1.118).
        GgmlType::Q2_K => buf.chunks_exact_mut(BlockQ2_K::SIZE).for_each(|b| {
            let d = SIGMA / (8.0 * 1.118);
            b[BlockQ2_K::OFF_SCALES..BlockQ2_K::OFF_SCALES + 16].fill(0x88);
            patch(b, BlockQ2_K::OFF_D, d);
            patch(b, BlockQ2_K::OFF_DMIN, 1.5 * d);
        }),
        // x = d (sc - 32) q, q uniform in -4..4 (sd 2.29, mean -0.5), with the 6-bit sc of the
        // even groups 40 and of the odd ones 24 (low nibbles 8; high bits 2 and 1) so that the
        // groups' means cancel.
        GgmlType::Q3_K => buf.chunks_exact_mut(BlockQ3_K::SIZE).for_each(|b| {
            b[BlockQ3_K::OFF_SCALES..BlockQ3_K::OFF_SCALES + 8].fill(0x88);
            b[BlockQ3_K::OFF_SCALES + 8..BlockQ3_K::OFF_SCALES + 12].copy_from_slice(&[0xAA, 0x55, 0xAA, 0x55]);
            patch(b, BlockQ3_K::OFF_D, SIGMA / (8.0 * 2.29));
        }),
        // x = d kvalues_iq4nl[q] (rms 67.4).
        GgmlType::IQ4_NL => {
            buf.chunks_exact_mut(BlockIQ4_NL::SIZE).for_each(|b| patch(b, BlockIQ4_NL::OFF_D, SIGMA / 67.4))
        }
        // x = d * sc * (q - 32) with every int8 sc = 8, q uniform in 0..64 (sd 18.5).
        GgmlType::Q6_K => buf.chunks_exact_mut(BlockQ6_K::SIZE).for_each(|b| {
            b[BlockQ6_K::OFF_SCALES..BlockQ6_K::OFF_SCALES + 16].fill(8);
            patch(b, BlockQ6_K::OFF_D, SIGMA / (8.0 * 18.5));
        }),
        _ => {}
    }
}
