//! Parameters of the graph's ops: what a model states about each op beyond its inputs
//! (RoPE, attention, mixture-of-experts routing, recurrent layers).

use crate::graph::WeightId;

/// Gate activation of a gated FFN: `act(gate) * up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (SwiGLU), `x * sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation, as ggml evaluates it (`ggml_gelu`: through a table indexed by
    /// the f16-rounded input), as Gemma uses (GeGLU) and as llama.cpp's results reflect.
    GeluTanh,
    /// The same GELU evaluated in f32 throughout (transformers' `gelu_pytorch_tanh`): for a
    /// model whose reference implementation is transformers, not llama.cpp (DiffusionGemma).
    GeluTanhExact,
    /// Sigmoid gate, `sigmoid(gate) * up` (Qwen3.5's output-gated attention).
    Sigmoid,
    /// gpt-oss's clamped SwiGLU (`ggml_swiglu_oai`, alpha 1.702, limit 7):
    /// `x = min(gate, 7)`, `y = clamp(up, -7, 7)`, `x * sigmoid(1.702 x) * (y + 1)`.
    SwigluOai,
}

/// `ggml_swiglu_oai`'s constants as gpt-oss uses them.
pub const SWIGLU_OAI_ALPHA: f32 = 1.702;
/// See [`SWIGLU_OAI_ALPHA`].
pub const SWIGLU_OAI_LIMIT: f32 = 7.0;

/// How RoPE pairs dimensions (`LLAMA_ROPE_TYPE_NORM` / `_NEOX` in llama.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeMode {
    /// Adjacent pairs `(2i, 2i+1)` (original LLaMA).
    Normal,
    /// Halves `(i, i + n_rot/2)` (GPT-NeoX, Qwen2, Gemma).
    Neox,
}

/// Context-extension scaling of RoPE frequencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    /// Plain RoPE (`freq_scale` may still be < 1 for linear scaling).
    None,
    /// YaRN (`ggml_rope_yarn_corr_dims`): blend of interpolation and extrapolation.
    Yarn { ext_factor: f32, attn_factor: f32, beta_fast: f32, beta_slow: f32, n_ctx_orig: u32 },
}

/// Parameters of a RoPE op (mirrors the arguments of `ggml_rope_ext`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeParams {
    pub mode: RopeMode,
    /// Head dimension; the op rotates each `head_dim`-wide group of columns.
    pub head_dim: u32,
    /// Rotated dimensions per head (≤ head_dim; the rest pass through).
    pub n_rot: u32,
    pub freq_base: f32,
    /// Linear position scaling (1.0 = none).
    pub freq_scale: f32,
    pub scaling: RopeScaling,
    /// Optional per-dimension frequency divisors (`rope_freqs.weight`, `n_rot/2` f32).
    pub freq_factors: Option<WeightId>,
}

/// Attention temperature tuning (Llama 4's no-RoPE layers, `llm_graph_input_attn_temp`): row
/// `r` is multiplied by `log(floor((pos_r + offset) / floor_scale) + 1) * scale + 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TempScaleParams {
    pub floor_scale: u32,
    pub scale: f32,
    pub offset: f32,
}

impl TempScaleParams {
    /// The factor at a position.
    pub fn factor(&self, pos: u32) -> f32 {
        ((((pos as f32) + self.offset) / self.floor_scale as f32).floor() + 1.0).ln() * self.scale + 1.0
    }
}

/// Parameters of an attention op over the paged KV cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttnParams {
    /// Which KV cache layer this attention reads (and writes, if `write_kv`).
    pub kv_layer: u32,
    pub n_head: u32,
    pub n_kv_head: u32,
    pub head_dim_k: u32,
    pub head_dim_v: u32,
    /// Multiplier of `q·k` before softmax (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// `softcap * tanh(s / softcap)` on scores (Gemma 2), if set.
    pub softcap: Option<f32>,
    /// Sliding window: a query at position `p` sees keys at `p - window < pos <= p`.
    pub window: Option<u32>,
    /// Chunked attention (Llama 4, `LLAMA_SWA_TYPE_CHUNKED`): a query at position `p` sees
    /// only keys of its own chunk, `p - p % chunk <= pos <= p`. Exclusive with `window`.
    pub chunk: Option<u32>,
    /// Per-head attention sinks (gpt-oss): a vector of `n_head` logits that join each row's
    /// softmax as a key with no value (`ggml_soft_max_add_sinks`).
    pub sinks: Option<WeightId>,
    /// Whether this op appends the step's K/V to the cache (false for KV-sharing layers).
    pub write_kv: bool,
    /// Bidirectional over the step (a diffusion canvas): every row of the step sees every
    /// other row, plus the cached keys the step's first row sees (its window, if any). A
    /// bidirectional step holds one sequence.
    pub bidirectional: bool,
}

/// How router logits become the weights of the chosen experts (`llama_expert_gating_func_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeGating {
    /// Softmax over all experts, then the chosen experts' probabilities (Qwen3-MoE, Gemma 4).
    Softmax,
    /// Sigmoid of each chosen expert's logit (Llama 4).
    Sigmoid,
    /// Softmax over the chosen experts' logits only (gpt-oss).
    SoftmaxChosen,
}

/// Where an expert's gate and up projections live: two 3-D tensors, or one fused
/// `ffn_gate_up_exps` whose rows `[0, n_ff)` of each expert are the gate and `[n_ff, 2 n_ff)` the up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertGateUp {
    Separate { gate: WeightId, up: WeightId },
    Fused(WeightId),
}

/// A dense gated FFN that every token goes through beside the routed experts (the "shared
/// expert"), optionally gated per token by `sigmoid(x · gate_inp)` (Qwen2-MoE, Qwen3.5-MoE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedExpert {
    pub gate: WeightId,
    pub up: WeightId,
    pub down: WeightId,
    /// A vector of the input width: the per-token gate's weights.
    pub gate_inp: Option<WeightId>,
}

/// Parameters of a mixture-of-experts FFN (mirrors llama.cpp `build_moe_ffn`).
///
/// Expert weights stay in their GGUF layout: 3-D tensors `{n_in, rows, n_expert}` whose
/// expert `e` is rows `e * rows .. (e + 1) * rows` of the flattened matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeParams {
    pub n_expert: u32,
    /// Experts chosen per token (top-k of the router logits).
    pub n_used: u32,
    /// Hidden width of one expert.
    pub n_ff: u32,
    pub gating: MoeGating,
    /// Divide the chosen weights by their sum (`norm_w`).
    pub renorm: bool,
    /// Scale each expert's input by its weight instead of its output (Llama 4,
    /// `weight_before_ffn`).
    pub weight_before: bool,
    pub gate_up: ExpertGateUp,
    pub down: WeightId,
    pub act: Activation,
    /// A vector of `n_expert` scales multiplying each chosen expert's weight (Gemma 4's
    /// `ffn_down_exps.scale`).
    pub expert_scale: Option<WeightId>,
    /// The shared expert added to the routed sum.
    pub shared: Option<SharedExpert>,
    /// Per-expert biases of the gate/up projections (`{n_ff, n_expert}` each, or
    /// `{2 n_ff, n_expert}` fused) and of the down projection (`{n_out, n_expert}`), as
    /// gpt-oss has (`ggml_add_id`).
    pub gate_up_bias: Option<ExpertGateUp>,
    pub down_bias: Option<WeightId>,
    /// The experts this op's expert tensors (and their biases) hold: `(first, count)` of the
    /// `n_expert` the router ranks, for expert parallelism (each device a slice of every
    /// layer's experts, the partial outputs summed). Routing stays over all experts; a chosen
    /// expert outside the slice contributes nothing here. `None`: every expert.
    pub expert_slice: Option<(u32, u32)>,
}

impl MoeParams {
    /// The slice of experts held, `(first, count)` (every expert without a slice).
    pub fn held_experts(&self) -> (u32, u32) {
        self.expert_slice.unwrap_or((0, self.n_expert))
    }
}

/// Parameters of a causal depthwise 1-D convolution over each sequence's tokens
/// (`ggml_ssm_conv`, as Mamba and gated DeltaNet layers use it).
///
/// The weight is `{kernel, channels}` f32; output row `t`, channel `c` is
/// `sum_j w[c][j] * x[t - (kernel - 1) + j][c]`, where rows before the step come from the
/// sequence's state slot (the last `kernel - 1` inputs, zeros at position 0), which the op
/// then overwrites with the step's last `kernel - 1` inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Conv1dParams {
    pub weight: WeightId,
    /// Taps of the convolution.
    pub kernel: u32,
    /// Index of the state layer holding the window (`(kernel - 1) * channels` f32).
    pub state: u32,
    /// Apply SiLU to the output.
    pub silu: bool,
}

/// Parameters of the gated delta rule (Yang et al. 2024, "Gated Delta Networks"; llama.cpp
/// `build_delta_net_autoregressive` / `ggml_gated_delta_net`), per value head `h` and token:
///
/// ```text
/// g = softplus(alpha_h) * decay[h];  b = sigmoid(beta_h)
/// S = exp(g) * S;  d = b * (v - S^T k);  S = S + k d^T;  o = S^T (q * scale)
/// ```
///
/// `S` is `head_dim x head_dim` per value head, kept in a state slot (zeros at position 0).
/// With more value heads than key heads, value head `h` reads key head `h % n_k_head`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeltaNetParams {
    pub n_k_head: u32,
    pub n_v_head: u32,
    pub head_dim: u32,
    /// `-exp(A_log)` per value head (`ssm_a`).
    pub decay: WeightId,
    /// Multiplier of q (`1/sqrt(head_dim)`).
    pub scale: f32,
    /// Index of the state layer (`n_v_head * head_dim^2` f32).
    pub state: u32,
}
