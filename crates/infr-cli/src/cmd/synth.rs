//! `infr synth`: write a random-weight GGUF with a real model's shapes, metadata and quant
//! mix (loadable by infr and llama.cpp) for speed tests without downloading weights.
//! The shapes are listed in `infr_models::synth`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use infr_models::synth::{self, Shape, SynthPlan, SynthQuant};

/// Arguments of `infr synth`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model shape: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, llama3-8b,
    /// qwen3-30b-a3b, gpt-oss-20b, qwen3.5-9b, qwen3.6-35b-a3b, gemma4-31b, gemma4-26b-a4b,
    /// gemma4-e4b, diffusiongemma-26b-a4b (and tiny-qwen3, tiny-llama3, tiny-qwen3moe,
    /// tiny-gpt-oss, tiny-qwen35, tiny-qwen35moe, tiny-gemma4, tiny-gemma4-moe,
    /// tiny-diffusiongemma for tests).
    #[arg(long)]
    pub shape: String,
    /// Quantization mix as llama-quantize makes it: Q4_K_M, Q8_0, Q4_0, Q2_K, F16 or
    /// MXFP4_MOE.
    #[arg(long, default_value = "Q4_K_M")]
    pub quant: String,
    /// Random seed (the file is a deterministic function of shape, quant, layers and seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Override the number of layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Output file.
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
}

/// Run `infr synth`.
pub fn run(a: Args) -> Result<()> {
    let shape = Shape::by_name(&a.shape)?;
    let quant = SynthQuant::from_name(&a.quant)?;
    let plan = SynthPlan::new(shape, quant, a.layers)?;
    if let Some(dir) = a.output.parent().filter(|d| !d.as_os_str().is_empty()) {
        anyhow::ensure!(
            dir.is_dir(),
            "cannot write {}: directory {} does not exist",
            a.output.display(),
            dir.display()
        );
    }
    eprintln!(
        "writing {} {} ({} layers, {} parameters, seed {})",
        shape.name,
        quant.name(),
        plan.shape.n_layer,
        params(plan.n_params()),
        a.seed
    );
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40.cyan/blue} {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let result = synth::write(&plan, a.seed, &a.output, &mut |done, total| {
        if bar.length() != Some(total) {
            bar.set_length(total);
        }
        bar.set_position(done);
    });
    bar.finish_and_clear();
    // The error names the path already; flatten it to one line.
    let sum = result.map_err(|e| anyhow::anyhow!("{e}"))?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{}: {:.2} GiB ({} bytes), {} tensors, {} parameters, written in {secs:.1}s ({:.0} MiB/s)",
        sum.path.display(),
        sum.bytes as f64 / (1u64 << 30) as f64,
        sum.bytes,
        sum.tensors,
        params(sum.n_params),
        sum.bytes as f64 / (1 << 20) as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// A parameter count with a unit: `8.19 B`, `1.71 M`.
fn params(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.2} B", n as f64 / 1e9)
    } else {
        format!("{:.2} M", n as f64 / 1e6)
    }
}
