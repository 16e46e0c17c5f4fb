//! The schema: the typed [`Config`] and the [`KEYS`] table that drives defaults, env names, type checks,
//! `infr config` and the docs table.
//!
//! Adding a knob: add the field (with its `///` doc) to its section struct, and one [`KeySpec`] line to
//! [`KEYS`]. A unit test fails if the two disagree. A new section is a new struct plus a field in [`Config`].

use serde::{Deserialize, Serialize};

use crate::units::Seed;

/// The type of a key, which decides how text from env/`--set` is parsed and what the file may contain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// `true`/`false` (env and `--set` also take `1/0`, `yes/no`, `on/off`).
    Bool,
    /// A whole number in `min..=max`.
    Int {
        /// Smallest allowed value.
        min: i64,
        /// Largest allowed value.
        max: i64,
    },
    /// A finite number in `min..=max` (integers are accepted).
    Float {
        /// Smallest allowed value.
        min: f64,
        /// Largest allowed value.
        max: f64,
    },
    /// Any string.
    Str,
    /// One of a fixed set of strings (case-insensitive on input).
    Choice(&'static [&'static str]),
    /// A [`crate::SizeSpec`]: `19g`, `512m`, `80%`, or a byte count (no key uses it yet; the
    /// MoE expert cache of the memory issue will).
    Size,
    /// A [`Seed`]: an unsigned integer, or `-1`/`none`/`random`.
    Seed,
    /// A [`crate::ContextSize`]: `8192`, `32k`, `0` (the model's), `50%`.
    Context,
}

/// Any `i64`.
pub const INT: Kind = Kind::Int { min: i64::MIN, max: i64::MAX };
/// A non-negative `u32`-range integer.
pub const UINT: Kind = Kind::Int { min: 0, max: u32::MAX as i64 };
/// A non-negative float.
pub const UFLOAT: Kind = Kind::Float { min: 0.0, max: f64::MAX };

/// Metadata of one configuration key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeySpec {
    /// Dotted path, e.g. `sampling.temperature`.
    pub key: &'static str,
    /// Value type.
    pub kind: Kind,
    /// Default as a TOML literal (`0.8`, `"auto"`, `true`); empty for "unset" (an `Option` field).
    pub default: &'static str,
    /// Extra environment names, after the canonical `INFR_SECTION_KEY` (which wins over them).
    pub env_aliases: &'static [&'static str],
    /// The command-line flag mapped onto this key, for docs and messages.
    pub flag: Option<&'static str>,
    /// Hide the value in `infr config` output.
    pub secret: bool,
    /// One-line description.
    pub doc: &'static str,
}

impl KeySpec {
    /// A key with no aliases, flag or secrecy.
    pub const fn new(key: &'static str, kind: Kind, default: &'static str, doc: &'static str) -> Self {
        KeySpec { key, kind, default, env_aliases: &[], flag: None, secret: false, doc }
    }

    /// Adds environment aliases (e.g. `INFR_CTX`).
    pub const fn env(mut self, aliases: &'static [&'static str]) -> Self {
        self.env_aliases = aliases;
        self
    }

    /// Names the CLI flag for this key.
    pub const fn flag(mut self, flag: &'static str) -> Self {
        self.flag = Some(flag);
        self
    }

    /// Marks the value as secret (redacted by `infr config`).
    pub const fn secret(mut self) -> Self {
        self.secret = true;
        self
    }

    /// The canonical environment name: `INFR_` + the path upper-cased with `.` → `_`.
    pub fn canonical_env(&self) -> String {
        format!("INFR_{}", self.key.replace('.', "_").to_ascii_uppercase())
    }

    /// All environment names, canonical first.
    pub fn env_names(&self) -> Vec<String> {
        let canonical = self.canonical_env();
        let aliases = self.env_aliases.iter().map(|a| a.to_string()).filter(|a| *a != canonical);
        std::iter::once(canonical.clone()).chain(aliases).collect()
    }
}

const KV_TYPES: &[&str] = &["f16", "f32", "q8_0"];
const REASONING_FORMATS: &[&str] = &["none", "deepseek", "auto"];

/// Every configuration key. Order is the order of `infr config` and of the docs table.
pub const KEYS: &[KeySpec] = &[
    KeySpec::new("model.path_or_ref", Kind::Str, "", "Local GGUF path or hub ref `org/repo[:quant]`.")
        .flag("-m, --model")
        .env(&["INFR_MODEL"]),
    KeySpec::new("model.offline", Kind::Bool, "false", "Resolve models from the local HF cache only.")
        .flag("--offline")
        .env(&["HF_HUB_OFFLINE"]),
    KeySpec::new("model.hf_endpoint", Kind::Str, "", "Hugging Face endpoint or mirror URL.").env(&["HF_ENDPOINT"]),
    KeySpec::new("device.dev", Kind::Str, "\"auto\"", "Compute device: `auto`, `cpu`, `Vulkan0`, ...; a list (`Vulkan0,Vulkan1`) splits the model across them (`multi.pipeline`, `multi.tensor_parallel`, `multi.expert_parallel`).")
        .flag("--device")
        .env(&["INFR_DEV"]),
    KeySpec::new("device.threads", UINT, "0", "CPU threads; 0 = auto.").flag("-t, --threads"),
    KeySpec::new(
        "device.gpu_layers",
        Kind::Int { min: -1, max: i32::MAX as i64 },
        "-1",
        "Layers whose weights stay in GPU memory; later layers' weights are read from host memory across the bus. -1 = all that fit; 0 = run on the CPU.",
    )
    .flag("-ngl, --gpu-layers"),
    KeySpec::new(
        "device.memory_limit",
        Kind::Size,
        "0",
        "Most GPU memory infr's buffers may hold (`12g`, `80%` of the device's); 0 = all the device gives.",
    ),
    KeySpec::new(
        "device.expert_cache",
        Kind::Size,
        "0",
        "GPU memory for MoE expert weights (`19g`, or `80%` of the model's expert bytes); the rest stay in host memory the GPU reads across the bus. 0 = every expert that fits beside the other weights and the KV cache.",
    )
    .env(&["INFR_CACHE"]),
    KeySpec::new(
        "device.expert_paging",
        Kind::Bool,
        "true",
        "Experts past the expert cache: true = every expert in host memory, with device slots per layer that each step fills with the experts it routes to (least recently used out; where the cache holds one token's experts per layer); false = the first layers' experts stay whole on the device, as llama.cpp's --n-cpu-moe keeps the last ones off it.",
    )
    .env(&["INFR_EXPERT_PAGING"]),
    KeySpec::new(
        "multi.pipeline",
        Kind::Bool,
        "true",
        "With several devices in `device.dev` (`Vulkan0,Vulkan1`; one named twice opens two logical devices on it): split the model's layers across them in order, each running its layers and handing its activations to the next through host memory. false refuses several devices unless `multi.tensor_parallel` or `multi.expert_parallel`.",
    ),
    KeySpec::new(
        "multi.tensor_parallel",
        Kind::Bool,
        "false",
        "With several devices in `device.dev`: divide every layer among them instead of the layers (attention by KV-head groups with each device's share of the KV cache, gated FFNs by hidden columns, MoE layers by experts; after each divided block the partial outputs are summed through host memory). Blocks that do not divide (KV heads fewer than the devices, a norm after the projection, cuts off the quantization blocks) run whole on every device; a model where nothing divides is refused. Wins over `multi.expert_parallel`.",
    ),
    KeySpec::new(
        "multi.expert_parallel",
        Kind::Bool,
        "false",
        "With several devices in `device.dev`: divide every MoE layer's experts among them instead of the layers (each device holds the other weights and its own KV cache; the experts' partial outputs are summed through host memory after each MoE layer). Models without MoE layers, or whose MoE output is not added straight to the residual, are refused.",
    ),
    KeySpec::new(
        "multi.split",
        Kind::Str,
        "\"\"",
        "Share of the layers each pipeline device runs, in `device.dev` order (`3,1`, as llama.cpp's --tensor-split in layer mode); empty = even.",
    )
    .flag("-ts, --tensor-split"),
    KeySpec::new(
        "context.size",
        Kind::Context,
        "4096",
        "Context window: tokens (`8192`, `32k`), `0` for the model's trained context, or `50%`: the longest context whose KV cache fits in that share of the device memory left after the weights.",
    )
        .flag("-c, --ctx-size")
        .env(&["INFR_CTX"]),
    KeySpec::new("context.ubatch", Kind::Int { min: 1, max: u32::MAX as i64 }, "512", "Physical micro-batch (tokens).")
        .flag("-ub, --ubatch-size"),
    KeySpec::new("sampling.temperature", UFLOAT, "0.8", "Sampling temperature; 0 = greedy.").flag("--temp"),
    KeySpec::new("sampling.top_k", INT, "40", "Top-k cutoff; <= 0 disables.").flag("--top-k"),
    KeySpec::new("sampling.top_p", Kind::Float { min: 0.0, max: 1.0 }, "0.95", "Nucleus cutoff; 1 disables.")
        .flag("--top-p"),
    KeySpec::new("sampling.min_p", Kind::Float { min: 0.0, max: 1.0 }, "0.05", "Min-p cutoff; 0 disables.")
        .flag("--min-p"),
    KeySpec::new("sampling.repeat_penalty", UFLOAT, "1.0", "Repetition penalty; 1 disables.").flag("--repeat-penalty"),
    KeySpec::new(
        "sampling.repeat_last_n",
        Kind::Int { min: -1, max: i32::MAX as i64 },
        "64",
        "Tokens the penalty sees; -1 = context.",
    )
    .flag("--repeat-last-n"),
    KeySpec::new("sampling.presence_penalty", Kind::Float { min: -2.0, max: 2.0 }, "0.0", "Presence penalty.")
        .flag("--presence-penalty"),
    KeySpec::new("sampling.frequency_penalty", Kind::Float { min: -2.0, max: 2.0 }, "0.0", "Frequency penalty.")
        .flag("--frequency-penalty"),
    KeySpec::new("sampling.seed", Kind::Seed, "\"random\"", "RNG seed; -1/none/random = random.").flag("-s, --seed"),
    KeySpec::new(
        "sampling.max_tokens",
        Kind::Int { min: -1, max: i64::MAX },
        "-1",
        "Tokens to generate; -1 = until EOS/context.",
    )
    .flag("-n, --n-predict"),
    KeySpec::new("kv.type", Kind::Choice(KV_TYPES), "\"f16\"", "KV cache element type: f16, f32, q8_0.")
        .flag("--kv-type"),
    KeySpec::new("kv.page_size", Kind::Int { min: 1, max: u32::MAX as i64 }, "256", "KV page size in tokens."),
    KeySpec::new(
        "kv.spill_to_host",
        Kind::Bool,
        "true",
        "KV cache layers that find no room in GPU memory go to host memory the GPU reads across the bus (slower) instead of failing.",
    ),
    KeySpec::new("server.host", Kind::Str, "\"127.0.0.1\"", "Address the server binds.").flag("--host"),
    KeySpec::new("server.port", Kind::Int { min: 0, max: 65535 }, "8080", "Port the server binds.").flag("--port"),
    KeySpec::new("server.parallel", Kind::Int { min: 1, max: u32::MAX as i64 }, "4", "Concurrent sequences.")
        .flag("-np, --parallel"),
    KeySpec::new("server.api_key", Kind::Str, "", "Bearer key clients must send; unset = open.")
        .flag("--api-key")
        .env(&["INFR_API_KEY"])
        .secret(),
    KeySpec::new("server.queue_size", UINT, "64", "Requests waiting beyond `parallel` before 503."),
    KeySpec::new(
        "server.request_timeout_s",
        Kind::Int { min: 0, max: i64::MAX },
        "600",
        "Per-request timeout (s); 0 = none.",
    ),
    KeySpec::new(
        "server.shutdown_grace_s",
        Kind::Int { min: 0, max: i64::MAX },
        "30",
        "On SIGINT/SIGTERM, time running requests get to finish (s).",
    ),
    KeySpec::new("server.metrics", Kind::Bool, "false", "Serve Prometheus metrics at /metrics.").flag("--metrics"),
    KeySpec::new(
        "server.chat_template_file",
        Kind::Str,
        "",
        "Jinja chat template file used instead of the model's own; unset = the model's.",
    )
    .flag("--chat-template-file"),
    KeySpec::new(
        "server.reasoning_format",
        Kind::Choice(REASONING_FORMATS),
        "\"auto\"",
        "Split `<think>` reasoning out of replies: none, deepseek, auto.",
    )
    .flag("--reasoning-format"),
    KeySpec::new("kernels.vulkan.flash_splits", UINT, "0", "Key splits per (token, head) of decode attention (up to 256, each of at least 64 keys); 0 = auto (at most 32, or 64 on the lane-group kernel)."),
    KeySpec::new("kernels.vulkan.coopmat", Kind::Bool, "true", "Use cooperative-matrix kernels when supported."),
    KeySpec::new("kernels.vulkan.int_dot", Kind::Bool, "true", "Use integer dot-product kernels when supported."),
    KeySpec::new("kernels.vulkan.fusion", Kind::Bool, "true", "Merge small decode ops into fused kernels.")
        .env(&["INFR_VK_FUSION"]),
    KeySpec::new("kernels.vulkan.validation", Kind::Bool, "false", "Enable Vulkan validation layers.")
        .env(&["INFR_VK_VALIDATION"]),
    KeySpec::new("prof.ops", Kind::Bool, "false", "Profile per-op timings.").env(&["INFR_PROF_OPS"]),
    KeySpec::new("prof.op_shapes", Kind::Bool, "false", "Break op timings down by shape.")
        .env(&["INFR_PROF_OP_SHAPES"]),
    KeySpec::new("log.level", Kind::Str, "\"info\"", "Log filter (`info`, `debug`, `infr_cpu=trace`...).")
        .flag("--log-level")
        .env(&["INFR_LOG"]),
];

/// `INFR_*` variables that are not config keys (test switches, the config path, kernel tuning
/// knobs): never warned about.
pub const NON_KEY_ENV_PREFIXES: &[&str] = &[
    "INFR_CONFIG",
    "INFR_REQUIRE_",
    "INFR_TEST_",
    "INFR_CPU_SIMD",
    "INFR_CPU_DELTA_",
    "INFR_VK_ATTN_",
    "INFR_VK_COOP_",
    "INFR_VK_DELTA_",
    "INFR_VK_DEQ16_",
    "INFR_VK_DUMP_",
    "INFR_VK_F16_",
    "INFR_VK_MOE_",
    "INFR_VK_PIPELINE_",
    "INFR_VK_Q8_",
    "INFR_VK_SKINNY_",
];

/// Looks up a key's metadata.
pub fn key_spec(key: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|k| k.key == key)
}

/// The whole configuration, resolved once at startup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Config {
    /// Which model and where it comes from.
    pub model: ModelConfig,
    /// Device placement.
    pub device: DeviceConfig,
    /// One model across several devices.
    pub multi: MultiConfig,
    /// Context and batching.
    pub context: ContextConfig,
    /// Default sampling parameters.
    pub sampling: SamplingConfig,
    /// KV cache.
    pub kv: KvConfig,
    /// HTTP server.
    pub server: ServerConfig,
    /// Kernel knobs per backend.
    pub kernels: KernelsConfig,
    /// Profiling switches.
    pub prof: ProfConfig,
    /// Logging.
    pub log: LogConfig,
}

/// `[model]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// Local GGUF path or hub reference; unset when not configured.
    pub path_or_ref: Option<String>,
    /// Resolve from the HF cache only.
    pub offline: bool,
    /// Hub endpoint override (mirror); unset = `HF_ENDPOINT` / huggingface.co.
    pub hf_endpoint: Option<String>,
}

/// `[device]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceConfig {
    /// `auto`, `cpu`, `Vulkan0`, ...
    pub dev: String,
    /// CPU threads; 0 = auto.
    pub threads: u32,
    /// Layers offloaded to the GPU; -1 = all.
    pub gpu_layers: i32,
    /// Most GPU memory the buffers may hold (0 bytes: no limit).
    pub memory_limit: crate::SizeSpec,
    /// GPU memory for MoE expert weights (0 bytes: as much as fits).
    pub expert_cache: crate::SizeSpec,
    /// Experts past the cache: device slots filled per step (true) or whole layers (false).
    pub expert_paging: bool,
}

/// `[multi]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MultiConfig {
    /// Split the layers across the devices of a `device.dev` list.
    pub pipeline: bool,
    /// Divide every layer's heads, FFN columns and experts among the devices.
    pub tensor_parallel: bool,
    /// Divide the MoE experts among the devices instead of the layers.
    pub expert_parallel: bool,
    /// Share of the layers per device (`3,1`); empty = even.
    pub split: String,
}

/// `[context]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextConfig {
    /// Context window (tokens, the model's, or a share of memory).
    pub size: crate::ContextSize,
    /// Physical micro-batch size.
    pub ubatch: u32,
}

/// `[sampling]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingConfig {
    /// Temperature; 0 = greedy.
    pub temperature: f32,
    /// Top-k; <= 0 disables.
    pub top_k: i32,
    /// Top-p; 1 disables.
    pub top_p: f32,
    /// Min-p; 0 disables.
    pub min_p: f32,
    /// Repetition penalty; 1 disables.
    pub repeat_penalty: f32,
    /// Window of the repetition penalty; -1 = whole context.
    pub repeat_last_n: i32,
    /// Presence penalty.
    pub presence_penalty: f32,
    /// Frequency penalty.
    pub frequency_penalty: f32,
    /// RNG seed.
    pub seed: Seed,
    /// Tokens to generate; -1 = unlimited.
    pub max_tokens: i64,
}

/// KV cache element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvType {
    /// Half precision.
    F16,
    /// Single precision.
    F32,
    /// 8-bit blocks of 32 with an f16 scale.
    #[serde(rename = "q8_0")]
    Q8_0,
}

/// `[kv]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvConfig {
    /// Element type.
    pub r#type: KvType,
    /// Page size in tokens.
    pub page_size: u32,
    /// Whether KV layers without room on the GPU go to host memory.
    pub spill_to_host: bool,
}

/// `[server]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerConfig {
    /// Bind address.
    pub host: String,
    /// Bind port.
    pub port: u16,
    /// Concurrent sequences.
    pub parallel: u32,
    /// Required bearer key; unset = no auth.
    pub api_key: Option<String>,
    /// Queue length before rejecting.
    pub queue_size: u32,
    /// Request timeout in seconds; 0 = none.
    pub request_timeout_s: u64,
    /// At shutdown, seconds running requests get to finish before they are ended.
    pub shutdown_grace_s: u64,
    /// Expose `/metrics`.
    pub metrics: bool,
    /// A chat template file that replaces the model's (llama-server's `--chat-template-file`).
    pub chat_template_file: Option<String>,
    /// How `<think>` reasoning in replies is reported.
    pub reasoning_format: ReasoningFormat,
}

/// How the server reports `<think>...</think>` reasoning (llama.cpp's `--reasoning-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningFormat {
    /// Replies as generated, tags in the content.
    None,
    /// Reasoning in `reasoning_content` / a `thinking` block.
    Deepseek,
    /// As `deepseek`; a prompt ending with `<think>` counts only for templates that use it.
    Auto,
}

/// `[kernels]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelsConfig {
    /// `[kernels.vulkan]`
    pub vulkan: VulkanKernelsConfig,
}

/// `[kernels.vulkan]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VulkanKernelsConfig {
    /// Key splits per (token, head) of decode attention; 0 = auto.
    pub flash_splits: u32,
    /// Use cooperative-matrix kernels.
    pub coopmat: bool,
    /// Use integer dot-product kernels.
    pub int_dot: bool,
    /// Merge small decode ops (norms, RoPE, quantization) into fused kernels.
    pub fusion: bool,
    /// Enable validation layers.
    pub validation: bool,
}

/// `[prof]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfConfig {
    /// Per-op timings.
    pub ops: bool,
    /// Per-shape op timings.
    pub op_shapes: bool,
}

/// `[log]`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogConfig {
    /// `tracing` filter directive.
    pub level: String,
}
