//! Opening models and building backends from command-line choices.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use infr_config::ContextSize;
use infr_core::{Backend, GgufWeights, KvDType};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{Runner, RunnerOptions};
use infr_tokenizer::Tokenizer;

/// Resolve a MODEL argument to a local file: an existing path wins; otherwise it is a hub
/// reference (`org/repo[:quant]`, `org/repo:file.gguf`, `hf:`…) resolved from the shared
/// Hugging Face cache, downloading it when missing (unless offline).
pub fn model_path(model: &str) -> Result<PathBuf> {
    // Commands without device flags still honour the config file and `INFR_*` environment.
    let cfg = infr_config::ConfigBuilder::new().resolve()?.config;
    model_path_with(model, &cfg)
}

/// [`model_path`] with the hub settings of a resolved configuration (`model.offline`,
/// `model.hf_endpoint`; tokens and the cache location come from the usual `HF_*` variables).
pub fn model_path_with(model: &str, cfg: &infr_config::Config) -> Result<PathBuf> {
    let mut hub = infr_hub::HubOptions::from_env();
    hub.offline = cfg.model.offline;
    if let Some(e) = cfg.model.hf_endpoint.as_deref().filter(|e| !e.trim().is_empty()) {
        hub.endpoint = e.trim().trim_end_matches('/').to_owned();
    }
    let resolved = infr_hub::resolve_blocking(model, hub).with_context(|| format!("model '{model}'"))?;
    match resolved.paths.into_iter().next() {
        Some(p) => Ok(p),
        None => bail!("model '{model}' resolved to no file"),
    }
}

/// Open a GGUF model (all its shards).
pub fn open_weights(model: &str) -> Result<GgufWeights> {
    open_path(&model_path(model)?)
}

/// Open an already resolved GGUF file (all its shards).
pub fn open_path(path: &std::path::Path) -> Result<GgufWeights> {
    GgufWeights::open(path).with_context(|| format!("loading {}", path.display()))
}

/// Build the tokenizer from the model's metadata.
pub fn tokenizer(w: &GgufWeights) -> Result<Tokenizer> {
    Ok(Tokenizer::from_metadata(infr_core::WeightSource::metadata(w))?)
}

/// Device selection and configuration layers shared by the commands that load a model.
/// Values not given here come from the resolved configuration (`infr config` shows it).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// Device: `cpu`, `Vulkan0`, `Vulkan1`… (`infr devices` lists them); `auto` (default)
    /// picks the first GPU and falls back to the CPU. A list (`Vulkan0,Vulkan1`) splits the
    /// model's layers across the devices (`multi.pipeline`), or divides every layer by heads
    /// and FFN columns (`multi.tensor_parallel`) or by experts (`multi.expert_parallel`).
    /// Config key `device.dev`, env `INFR_DEV`.
    #[arg(long = "dev", visible_alias = "device")]
    pub dev: Option<String>,
    /// CPU threads (0 = all cores). Config key `device.threads`.
    #[arg(short = 't', long = "threads")]
    pub threads: Option<u32>,
    /// Layers whose weights stay in GPU memory, as llama.cpp's `-ngl` counts them: 0 runs the
    /// model on the CPU; -1 (default) keeps every layer there while the model fits (else as
    /// many as fit); with N, the later layers' weights stay in host memory and the GPU reads
    /// them across the bus (it still computes every layer). Config key `device.gpu_layers`.
    #[arg(long = "ngl", visible_aliases = ["gpu-layers", "n-gpu-layers"], allow_negative_numbers = true)]
    pub gpu_layers: Option<i32>,
    /// Share of the layers each device of a `--dev` list runs (`3,1`), as llama.cpp's
    /// `--tensor-split` in layer mode; even by default. Config key `multi.split`.
    #[arg(long = "tensor-split", visible_alias = "ts")]
    pub tensor_split: Option<String>,
    /// Use the plain reference kernels on the CPU (slow; for checking the fast ones).
    #[arg(long)]
    pub reference: bool,
    /// Config file to read instead of the discovered one (`./infr.toml`, `$XDG_CONFIG_HOME/infr/config.toml`).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
    /// Set any configuration key: `--set kv.type=q8_0` (repeatable; a flag for the same key wins).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
}

/// Command-line flags that override configuration keys, collected before resolving.
#[derive(Default)]
pub struct Flags(Vec<(&'static str, &'static str, infr_config::FlagValue)>);

impl Flags {
    /// Record `flag`'s value for `key` if the user gave it.
    pub fn opt<T: Into<infr_config::FlagValue>>(&mut self, key: &'static str, flag: &'static str, v: Option<T>) {
        if let Some(v) = v {
            self.0.push((key, flag, v.into()));
        }
    }
}

impl DeviceArgs {
    /// Resolve the configuration once: defaults < config file < `INFR_*` env < `--set` < flags
    /// (these device flags plus the command's own `flags`).
    pub fn resolve(&self, mut flags: Flags) -> Result<infr_config::Config> {
        flags.opt("device.dev", "--dev", self.dev.clone());
        flags.opt("device.threads", "--threads", self.threads);
        flags.opt("device.gpu_layers", "--gpu-layers", self.gpu_layers);
        flags.opt("multi.split", "--tensor-split", self.tensor_split.clone());
        let mut b = infr_config::ConfigBuilder::new().file(self.config.clone()).set_args(&self.sets);
        for (key, flag, value) in flags.0 {
            b = b.flag_named(key, flag, value);
        }
        let r = b.resolve()?;
        tracing::debug!("configuration:\n{}", r.explain());
        infr_core::set_profiling(r.config.prof.ops, r.config.prof.op_shapes);
        Ok(r.config)
    }
}

/// Build the backend for the configured device (`device.gpu_layers = 0` means the CPU); a
/// list of devices (`Vulkan0,Vulkan1`) runs `model` across them: tensor parallel, expert
/// parallel, or (default) as a pipeline split by `multi.split`.
pub fn backend_for(cfg: &infr_config::Config, reference: bool, model: &infr_models::Model) -> Result<Box<dyn Backend>> {
    let list: Vec<&str> = cfg.device.dev.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
    if list.len() < 2 || cfg.device.gpu_layers == 0 {
        if !cfg.multi.split.trim().is_empty() {
            tracing::warn!(
                "multi.split ({}) applies to a list of devices in device.dev; one device runs all layers",
                cfg.multi.split
            );
        }
        return backend(cfg, reference);
    }
    // The pipeline keeps each layer's weights on its device: nothing goes to host memory.
    let partial = usize::try_from(cfg.device.gpu_layers).is_ok_and(|n| n > 0 && n < model.info.n_layer);
    if partial || cfg.device.expert_cache != infr_config::SizeSpec::Bytes(0) {
        tracing::warn!(
            "--gpu-layers and the expert cache (INFR_CACHE) do not apply across a list of devices: every layer's \
             weights stay on its device"
        );
    }
    if !cfg.multi.pipeline && !cfg.multi.expert_parallel && !cfg.multi.tensor_parallel {
        bail!(
            "device.dev names {} devices but multi.pipeline, multi.tensor_parallel and multi.expert_parallel are \
             off: nothing else splits one model across devices",
            list.len()
        );
    }
    let mut stages = Vec::with_capacity(list.len());
    for d in &list {
        let one = infr_config::Config {
            device: infr_config::DeviceConfig { dev: (*d).to_owned(), ..cfg.device.clone() },
            ..cfg.clone()
        };
        stages.push(backend(&one, reference).with_context(|| format!("pipeline device '{d}'"))?);
    }
    if cfg.multi.tensor_parallel {
        return Ok(Box::new(infr_engine::ShardedBackend::tensor_parallel(stages, model)?));
    }
    if cfg.multi.expert_parallel {
        return Ok(Box::new(infr_engine::ShardedBackend::expert_parallel(stages, model)?));
    }
    let shares = infr_engine::pipeline::parse_split(&cfg.multi.split)?;
    Ok(Box::new(infr_engine::PipelineBackend::new(stages, model, &shares)?))
}

/// Build the backend for the configured device (`device.gpu_layers = 0` means the CPU).
pub fn backend(cfg: &infr_config::Config, reference: bool) -> Result<Box<dyn Backend>> {
    let dev = if cfg.device.gpu_layers == 0 { "cpu".to_owned() } else { cfg.device.dev.to_ascii_lowercase() };
    let threads = cfg.device.threads as usize;
    let cpu = || -> Result<Box<dyn Backend>> {
        let tier = if reference { KernelTier::Reference } else { KernelTier::Fast };
        Ok(Box::new(CpuBackend::new(CpuOptions { threads, tier })?))
    };
    if dev == "cpu" {
        return cpu();
    }
    if dev == "auto" {
        // lavapipe is a software rasterizer: slower than our CPU kernels, so `auto` skips it.
        let gpu = infr_vulkan::list_devices()
            .ok()
            .and_then(|list| list.into_iter().position(|i| !i.name.to_ascii_lowercase().contains("llvmpipe")));
        return match gpu {
            Some(device) => vulkan(device, cfg),
            None => cpu(),
        };
    }
    if let Some(n) = dev.strip_prefix("vulkan") {
        let device: usize =
            n.parse().with_context(|| format!("bad device '{}' (Vulkan0, Vulkan1…)", cfg.device.dev))?;
        return vulkan(device, cfg);
    }
    bail!("unknown device '{}' (cpu, auto, Vulkan0, Vulkan1…; see `infr devices`)", cfg.device.dev)
}

fn vulkan(device: usize, cfg: &infr_config::Config) -> Result<Box<dyn Backend>> {
    // A share of the device's memory needs its size; bytes do not.
    let memory_limit = match cfg.device.memory_limit {
        infr_config::SizeSpec::Bytes(b) => b,
        share => {
            let list = infr_vulkan::list_devices()?;
            let total = list.get(device).map(|d| d.memory_bytes).unwrap_or(0);
            share.resolve(total)
        }
    };
    let opts = infr_vulkan::VulkanOptions {
        memory_limit,
        kv_spill_to_host: cfg.kv.spill_to_host,
        device,
        validation: cfg.kernels.vulkan.validation,
        disable_coopmat: !cfg.kernels.vulkan.coopmat,
        disable_int8: !cfg.kernels.vulkan.int_dot,
        disable_fusion: !cfg.kernels.vulkan.fusion,
        attention_splits: cfg.kernels.vulkan.flash_splits,
        profile: cfg.prof.ops,
        ..Default::default()
    };
    Ok(Box::new(infr_vulkan::VulkanBackend::new(&opts)?))
}

/// The configured KV cache type.
pub fn kv_of(cfg: &infr_config::Config) -> KvDType {
    match cfg.kv.r#type {
        infr_config::KvType::F16 => KvDType::F16,
        infr_config::KvType::F32 => KvDType::F32,
        infr_config::KvType::Q8_0 => KvDType::Q8_0,
    }
}

/// Parse `--kv-type`.
pub fn kv_dtype(s: &str) -> Result<KvDType> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "f16" => KvDType::F16,
        "f32" => KvDType::F32,
        "q8_0" => KvDType::Q8_0,
        _ => bail!("unknown KV type '{s}' (f16, f32, q8_0)"),
    })
}

/// Load model + backend into a runner with `opts` (the KV page size comes from `kv.page_size`).
pub fn runner(w: &GgufWeights, d: &DeviceArgs, cfg: &infr_config::Config, opts: RunnerOptions) -> Result<Runner> {
    let n = opts.n_ctx * opts.n_seq;
    runner_with_context(w, d, cfg, ContextSize::Tokens(n as u64), opts)
}

/// [`runner`] with the context given as the configuration does: `ctx` tokens in all (divided
/// among `opts.n_seq` sequences, as llama.cpp's `-np` does), `0` for the model's trained
/// context, or a share of the memory left after the weights (the longest context per
/// sequence whose KV cache fits in it, at most the trained context). `opts.n_ctx` is ignored.
pub fn runner_with_context(
    w: &GgufWeights,
    d: &DeviceArgs,
    cfg: &infr_config::Config,
    ctx: ContextSize,
    mut opts: RunnerOptions,
) -> Result<Runner> {
    opts.page_size = cfg.kv.page_size;
    let n_seq = opts.n_seq.max(1);
    let model = infr_models::load_model(w)?;
    let backend = backend_for(cfg, d.reference, &model)?;
    // A share of the experts needs their size; bytes do not; 0 lets the runner fit them.
    opts.expert_cache = match cfg.device.expert_cache {
        infr_config::SizeSpec::Bytes(0) => None,
        share => Some(share.resolve(infr_engine::placement::expert_weight_bytes(&model))),
    };
    opts.expert_paging = cfg.device.expert_paging;
    opts.n_ctx = match ctx {
        ContextSize::Tokens(0) => match model.info.n_ctx_train {
            0 => bail!("--ctx-size 0 takes the model's trained context, but the file does not give one"),
            t => (t / n_seq).max(1),
        },
        ContextSize::Tokens(n) => (n as usize / n_seq).max(1),
        ContextSize::Percent(p) => {
            let Some(available) = backend.memory_available() else {
                bail!("--ctx-size {p}%: {} does not report its free memory; give a token count", backend.device().id)
            };
            let weights: u64 = model.weights.iter().map(|(id, _)| model.weights.info(id).bytes()).sum();
            let left = available.saturating_sub(weights);
            let budget = (left as f64 * p / 100.0) as u64;
            let Some(per_seq) = infr_engine::max_context(&model, &opts, budget) else {
                bail!(
                    "--ctx-size {p}%: {} MiB left after {} MiB of weights on {} holds no KV page",
                    left >> 20,
                    weights.div_ceil(1 << 20),
                    backend.device().id
                )
            };
            // Never past what the model was trained on (the share is a budget, not a target).
            let train = model.info.n_ctx_train;
            let n = if train > 0 { per_seq.min(train) } else { per_seq };
            tracing::info!(
                "context {p}% of the {} MiB left after the weights on {}: room for {per_seq} tokens per \
                 sequence, {n} used{}",
                left >> 20,
                backend.device().id,
                if n < per_seq { " (the model's trained context)" } else { "" }
            );
            n
        }
    };
    // Layers past `--gpu-layers` keep their weights in host memory (0 picked the CPU above).
    opts.gpu_layers = usize::try_from(cfg.device.gpu_layers).ok().filter(|&n| n > 0 && n < model.info.n_layer);
    warn_past_training_context(&model, opts.n_ctx);
    Ok(Runner::new(model, w, backend, opts)?)
}

/// A context longer than the model was trained on is allowed, but the user is told whether
/// RoPE scaling from the file covers it (quality usually drops past the trained length).
fn warn_past_training_context(model: &infr_models::Model, n_ctx: usize) {
    let train = model.info.n_ctx_train;
    if train == 0 || n_ctx <= train {
        return;
    }
    let hp = &model.hparams;
    let scaling = match hp.rope_scaling {
        infr_models::RopeScalingType::Yarn => format!(
            "the file's YaRN scaling (factor {:.1} over {} positions) applies",
            1.0 / hp.rope_freq_scale,
            hp.n_ctx_orig_yarn
        ),
        _ if hp.rope_freq_scale != 1.0 => {
            format!("the file's linear RoPE scaling (factor {:.1}) applies", 1.0 / hp.rope_freq_scale)
        }
        _ => "the file sets no RoPE scaling, so positions past it are extrapolated".to_owned(),
    };
    tracing::warn!(
        "a context of {n_ctx} tokens per sequence is longer than the {train} {} was trained on; {scaling}; \
         expect weaker answers past {train} tokens",
        model.info.name.as_deref().unwrap_or(&model.info.arch)
    );
}
