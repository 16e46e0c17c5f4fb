//! Opening models and building backends from command-line choices.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use infr_core::{Backend, GgufWeights, KvDType};
use infr_cpu::{CpuBackend, CpuOptions, KernelTier};
use infr_engine::{Runner, RunnerOptions};
use infr_tokenizer::Tokenizer;

/// Resolve a MODEL argument to a local file: an existing path wins; otherwise it is a hub
/// reference (`org/repo[:quant]`, `org/repo:file.gguf`, `hf:`…) resolved from the shared
/// Hugging Face cache, downloading it when missing (unless offline).
pub fn model_path(model: &str) -> Result<PathBuf> {
    model_path_with(model, infr_hub::HubOptions::from_env())
}

/// [`model_path`] with explicit hub options (`--offline`, endpoint…).
pub fn model_path_with(model: &str, opts: infr_hub::HubOptions) -> Result<PathBuf> {
    let resolved = infr_hub::resolve_blocking(model, opts).with_context(|| format!("model '{model}'"))?;
    match resolved.paths.into_iter().next() {
        Some(p) => Ok(p),
        None => bail!("model '{model}' resolved to no file"),
    }
}

/// Open a GGUF model (all its shards).
pub fn open_weights(model: &str) -> Result<GgufWeights> {
    let path = model_path(model)?;
    GgufWeights::open(&path).with_context(|| format!("loading {}", path.display()))
}

/// Build the tokenizer from the model's metadata.
pub fn tokenizer(w: &GgufWeights) -> Result<Tokenizer> {
    Ok(Tokenizer::from_metadata(infr_core::WeightSource::metadata(w))?)
}

/// Device selection shared by commands.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Device: `cpu`, `Vulkan0`, `Vulkan1`… (`infr devices` lists them); `auto` picks the
    /// first Vulkan device and falls back to the CPU.
    #[arg(long = "dev", visible_alias = "device", default_value = "auto", env = "INFR_DEV")]
    pub dev: String,
    /// CPU threads (0 = all cores).
    #[arg(short = 't', long = "threads", default_value_t = 0, env = "INFR_THREADS")]
    pub threads: usize,
    /// Use the plain reference kernels on the CPU (slow; for checking the fast ones).
    #[arg(long)]
    pub reference: bool,
}

/// Build the backend for `--dev`.
pub fn backend(d: &DeviceArgs) -> Result<Box<dyn Backend>> {
    let dev = d.dev.to_ascii_lowercase();
    let cpu = || -> Result<Box<dyn Backend>> {
        let tier = if d.reference { KernelTier::Reference } else { KernelTier::Fast };
        Ok(Box::new(CpuBackend::new(CpuOptions { threads: d.threads, tier })?))
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
            Some(device) => vulkan(device),
            None => cpu(),
        };
    }
    if let Some(n) = dev.strip_prefix("vulkan") {
        let device: usize = n.parse().with_context(|| format!("bad device '{}' (Vulkan0, Vulkan1…)", d.dev))?;
        return vulkan(device);
    }
    bail!("unknown device '{}' (cpu, auto, Vulkan0, Vulkan1…; see `infr devices`)", d.dev)
}

fn vulkan(device: usize) -> Result<Box<dyn Backend>> {
    let opts = infr_vulkan::VulkanOptions { device, ..Default::default() };
    Ok(Box::new(infr_vulkan::VulkanBackend::new(&opts)?))
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

/// Load model + backend into a runner.
pub fn runner(w: &GgufWeights, d: &DeviceArgs, opts: RunnerOptions) -> Result<Runner> {
    let model = infr_models::load_model(w)?;
    let backend = backend(d)?;
    Ok(Runner::new(model, w, backend, opts)?)
}
