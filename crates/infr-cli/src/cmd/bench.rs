//! `infr bench`: llama-bench compatible speed tests (`-m -p -n -pg -d -r -ngl -t -fa -ub`,
//! comma lists, `-o md|json|jsonl`). Each test is timed like llama-bench's: random prompt
//! tokens, a warm-up run, optional untimed context of `-d` tokens, then `-r` timed repetitions.
//!
//! On a diffusion model (DiffusionGemma) a generation test denoises whole canvases after its
//! prompt (one random token when the test has none), with the model's sampler settings and
//! no end-of-sequence stop; its t/s counts the committed tokens, and the record adds the
//! canvas length and the denoising steps per canvas.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use infr_engine::{RunnerOptions, StepItem};
use serde_json::json;

use crate::load::{self, DeviceArgs};

/// The models and test grid, as llama-bench names them (shared by `bench` and `compare`).
#[derive(clap::Args, Debug, Clone)]
pub struct TestArgs {
    /// Model file(s), comma separated or repeated.
    #[arg(short = 'm', long = "model", required = true, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Prompt lengths for pp tests (0 to skip).
    #[arg(short = 'p', long = "n-prompt", value_delimiter = ',', default_value = "512")]
    pub n_prompt: Vec<usize>,
    /// Generation lengths for tg tests (0 to skip).
    #[arg(short = 'n', long = "n-gen", value_delimiter = ',', default_value = "128")]
    pub n_gen: Vec<usize>,
    /// Context depth before each test.
    #[arg(short = 'd', long = "n-depth", value_delimiter = ',', default_value = "0")]
    pub n_depth: Vec<usize>,
}

/// Arguments of `infr bench` (names and defaults follow llama-bench).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub tests: TestArgs,
    /// Combined prompt+generation tests, `pp,tg` pairs.
    #[arg(long = "pg", value_delimiter = ';')]
    pub pg: Vec<String>,
    /// Repetitions.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Flash attention (accepted for compatibility).
    #[arg(long = "fa", visible_alias = "flash-attn", default_value_t = 0)]
    pub fa: i32,
    /// Physical batch size.
    #[arg(long = "ub", visible_alias = "ubatch-size", default_value_t = 512)]
    pub ubatch: usize,
    /// Logical batch size (accepted for compatibility).
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch: usize,
    /// Output format.
    #[arg(short = 'o', long = "output", default_value = "md")]
    pub output: String,
    /// Skip the warm-up run (as `--warmup-runs 0`).
    #[arg(long)]
    pub no_warmup: bool,
    /// Warm-up runs before the timed ones: the short one llama-bench also does, then
    /// untimed repetitions of the whole test (0: none). A GPU that idled ramps its clocks up
    /// over its first second or so of work (an H100 ran Qwen3-30B-A3B pp512 at 3,900-6,200
    /// t/s in the first timed run after one warm-up, 16,600-17,000 from the third on), so
    /// comparisons give each engine the same warm-up.
    #[arg(long, default_value_t = 1)]
    pub warmup_runs: usize,
    /// KV cache type.
    #[arg(long = "ctk", visible_alias = "cache-type-k", default_value = "f16")]
    pub kv_type: String,
    #[command(flatten)]
    pub diffusion: super::diffusion::DiffusionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
}

#[derive(Debug, Clone, Copy)]
struct Test {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
}

impl Test {
    fn name(&self) -> String {
        test_name(self.n_prompt, self.n_gen, self.n_depth)
    }
}

/// A test's name as llama-bench prints it: `pp512`, `tg128`, `pp512+tg128`, `… @ d4096`.
pub fn test_name(n_prompt: usize, n_gen: usize, n_depth: usize) -> String {
    let base = match (n_prompt, n_gen) {
        (p, 0) => format!("pp{p}"),
        (0, g) => format!("tg{g}"),
        (p, g) => format!("pp{p}+tg{g}"),
    };
    if n_depth > 0 {
        format!("{base} @ d{n_depth}")
    } else {
        base
    }
}

/// A small deterministic generator for benchmark tokens (llama-bench uses `rand()`).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as u32
    }
}

fn tests(a: &Args) -> Result<Vec<Test>> {
    let mut out = Vec::new();
    for &d in &a.tests.n_depth {
        for &p in a.tests.n_prompt.iter().filter(|&&p| p > 0) {
            out.push(Test { n_prompt: p, n_gen: 0, n_depth: d });
        }
        for &g in a.tests.n_gen.iter().filter(|&&g| g > 0) {
            out.push(Test { n_prompt: 0, n_gen: g, n_depth: d });
        }
        for pg in &a.pg {
            let (p, g) = pg.split_once(',').with_context(|| format!("-pg wants pp,tg, got '{pg}'"))?;
            out.push(Test { n_prompt: p.trim().parse()?, n_gen: g.trim().parse()?, n_depth: d });
        }
    }
    if out.is_empty() {
        bail!("no tests selected");
    }
    Ok(out)
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 { v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}

/// One measured test: the llama-bench compatible JSON record plus the display fields of the
/// markdown table.
pub struct Measurement {
    /// The record, with llama-bench's field names (`n_prompt`, `n_gen`, `n_depth`, `avg_ts`,
    /// `stddev_ts`, `samples_ts`…).
    pub record: serde_json::Value,
    /// Test name as llama-bench prints it (`pp512`, `tg128 @ d4096`).
    pub test: String,
    /// Thread count as the device reports it (empty when it does not).
    pub threads: String,
}

/// Run every test of `a` on every model, calling `on_result` after each one (to print as the
/// results come), and return the measurements.
pub fn measure(a: &Args, on_result: &mut dyn FnMut(&Measurement) -> Result<()>) -> Result<Vec<Measurement>> {
    let tests = tests(a)?;
    let mut results = Vec::new();
    for model in &a.tests.models {
        let w = load::open_weights(model)?;
        // A diffusion model generates whole canvases.
        let canvas = infr_models::load_model(&w).ok().and_then(|m| m.diffusion()).map_or(1, |p| p.canvas_length);
        let max_ctx =
            tests.iter().map(|t| t.n_depth + t.n_prompt.max(1) + t.n_gen.div_ceil(canvas) * canvas).max().unwrap_or(1)
                + 1;
        let opts = RunnerOptions {
            n_ctx: max_ctx,
            n_seq: 1,
            ubatch: a.ubatch,
            kv_dtype: load::kv_dtype(&a.kv_type)?,
            ..Default::default()
        };
        let mut r = load::runner(&w, &a.device, &a.device.resolve(load::Flags::default())?, opts)?;
        let diffusion = match r.model().diffusion() {
            Some(p) => Some(a.diffusion.params(p)?),
            None => None,
        };
        let nv = r.n_vocab();
        let size: u64 = w.gguf().tensor_bytes_total();
        let n_params: u64 = w.gguf().tensors().map(|t| t.info.n_elements()).sum();
        let backend = r.device().id.clone();
        let threads = r.device().features.iter().find_map(|f| f.strip_prefix("threads ").map(str::to_owned));
        let mut rng = Lcg(1234);
        for t in &tests {
            // Denoising steps per canvas of the diffusion repetitions, and tokens generated.
            let mut canvases: Vec<usize> = Vec::new();
            let mut generated = t.n_gen;
            // Seconds, steps of each canvas and tokens committed.
            let run_diffusion = |r: &mut infr_engine::Runner, rng: &mut Lcg| -> Result<(f64, Vec<usize>, usize)> {
                let p = diffusion.expect("a diffusion model");
                let seq = r.add_sequence();
                let result = (|| -> Result<(f64, Vec<usize>, usize)> {
                    if t.n_depth > 0 {
                        let ctx: Vec<u32> = (0..t.n_depth).map(|_| rng.next(nv)).collect();
                        r.prefill(seq, &ctx, false)?;
                    }
                    let prompt: Vec<u32> = (0..t.n_prompt.max(1)).map(|_| rng.next(nv)).collect();
                    let opts = infr_engine::DiffusionOptions { params: p, max_new_tokens: t.n_gen, eos: Vec::new() };
                    let mut noise = infr_engine::SeededNoise::new(rng.next(usize::MAX >> 1) as u64);
                    let out = infr_engine::generate_diffusion(r, seq, &prompt, &opts, &mut noise, |_| true)?;
                    let secs = if t.n_prompt > 0 { out.prompt_secs } else { 0.0 } + out.gen_secs;
                    Ok((secs, out.steps, out.tokens.len()))
                })();
                r.remove_sequence(seq);
                result
            };
            let run_once = |r: &mut infr_engine::Runner, rng: &mut Lcg| -> Result<f64> {
                let seq = r.add_sequence();
                let result = (|| -> Result<f64> {
                    if t.n_depth > 0 {
                        let ctx: Vec<u32> = (0..t.n_depth).map(|_| rng.next(nv)).collect();
                        r.prefill(seq, &ctx, false)?;
                    }
                    let start = Instant::now();
                    if t.n_prompt > 0 {
                        let p: Vec<u32> = (0..t.n_prompt).map(|_| rng.next(nv)).collect();
                        r.prefill(seq, &p, false)?;
                    }
                    for _ in 0..t.n_gen {
                        let tok = [rng.next(nv)];
                        r.step(&[StepItem { seq, tokens: &tok, all_logits: false }])?;
                    }
                    Ok(start.elapsed().as_secs_f64())
                })();
                r.remove_sequence(seq);
                result
            };
            let warmups = if a.no_warmup { 0 } else { a.warmup_runs };
            if warmups > 0 {
                tracing::debug!("bench {}: warm-up run 1 of {warmups}", t.name());
                let warm = Test { n_prompt: t.n_prompt.min(a.ubatch), n_gen: t.n_gen.min(1), n_depth: 0 };
                let seq = r.add_sequence();
                if warm.n_prompt > 0 {
                    let p: Vec<u32> = (0..warm.n_prompt).map(|_| rng.next(nv)).collect();
                    r.prefill(seq, &p, false)?;
                }
                if warm.n_gen > 0 {
                    r.step(&[StepItem { seq, tokens: &[rng.next(nv)], all_logits: false }])?;
                }
                r.remove_sequence(seq);
            }
            let denoise = diffusion.is_some() && t.n_gen > 0;
            if denoise && warmups > 0 {
                // The warm-up builds the denoiser plan and touches every page once.
                run_diffusion(&mut r, &mut rng)?;
            }
            for i in 1..warmups {
                tracing::debug!("bench {}: warm-up run {} of {warmups}", t.name(), i + 1);
                if denoise {
                    run_diffusion(&mut r, &mut rng)?;
                } else {
                    run_once(&mut r, &mut rng)?;
                }
            }
            let mut samples_ns = Vec::new();
            let mut samples_ts = Vec::new();
            for _ in 0..a.reps.max(1) {
                let secs = if denoise {
                    let (secs, steps, tokens) = run_diffusion(&mut r, &mut rng)?;
                    canvases.extend(steps);
                    generated = tokens;
                    secs
                } else {
                    run_once(&mut r, &mut rng)?
                };
                samples_ns.push((secs * 1e9) as u64);
                samples_ts.push((t.n_prompt + generated) as f64 / secs);
            }
            let ns: Vec<f64> = samples_ns.iter().map(|&v| v as f64).collect();
            let (avg_ns, std_ns) = mean_std(&ns);
            let (avg_ts, std_ts) = mean_std(&samples_ts);
            let desc =
                format!("{} {}", w.gguf().metadata().str("general.architecture")?.unwrap_or("?"), infr_quant_name(&w));
            let record = json!({
                "build_commit": env!("CARGO_PKG_VERSION"),
                "build_number": 0,
                "cpu_info": std::env::consts::ARCH,
                "gpu_info": if backend == "CPU" { String::new() } else { r.device().name.clone() },
                "backends": backend,
                "model_filename": model,
                "model_type": desc,
                "model_size": size,
                "model_n_params": n_params,
                "n_batch": a.batch,
                "n_ubatch": a.ubatch,
                "n_threads": threads.as_deref().and_then(|t| t.parse::<u64>().ok()).unwrap_or(0),
                "type_k": a.kv_type,
                "type_v": a.kv_type,
                "n_gpu_layers": a.device.gpu_layers.unwrap_or(99),
                "flash_attn": a.fa != 0,
                "n_prompt": t.n_prompt,
                "n_gen": t.n_gen,
                "n_depth": t.n_depth,
                "test_time": format!("{:?}", std::time::SystemTime::now()),
                "avg_ns": avg_ns as u64,
                "stddev_ns": std_ns as u64,
                "avg_ts": avg_ts,
                "stddev_ts": std_ts,
                "samples_ns": samples_ns,
                "samples_ts": samples_ts,
            });
            let mut record = record;
            let mut test = t.name();
            if denoise {
                let steps = canvases.iter().sum::<usize>() as f64 / canvases.len().max(1) as f64;
                let canvas = diffusion.map_or(0, |p| p.canvas_length);
                record["diffusion_canvas"] = json!(canvas);
                record["diffusion_steps_per_canvas"] = json!(steps);
                record["diffusion_tokens"] = json!(generated);
                test = format!("{test} (diffusion: {generated} tokens, {steps:.1} steps per canvas of {canvas})");
            }
            let m = Measurement { record, test, threads: threads.clone().unwrap_or_default() };
            on_result(&m)?;
            results.push(m);
        }
    }
    Ok(results)
}

/// Run `infr bench`.
pub fn run(a: Args) -> Result<()> {
    tests(&a)?;
    let md = a.output == "md";
    if !matches!(a.output.as_str(), "md" | "json" | "jsonl") {
        bail!("unknown output format '{}' (md, json, jsonl)", a.output);
    }
    if md {
        println!("| model | size | params | backend | threads | test | t/s |");
        println!("| --- | ---: | ---: | --- | ---: | --- | ---: |");
    }
    let results = measure(&a, &mut |m| {
        let rec = &m.record;
        if md {
            let f = |k: &str| rec[k].as_f64().unwrap_or(0.0);
            println!(
                "| {} | {:.2} GiB | {:.2} B | {} | {} | {} | {:.2} ± {:.2} |",
                rec["model_type"].as_str().unwrap_or("?"),
                f("model_size") / (1u64 << 30) as f64,
                f("model_n_params") / 1e9,
                rec["backends"].as_str().unwrap_or("?"),
                m.threads,
                m.test,
                f("avg_ts"),
                f("stddev_ts"),
            );
        }
        if a.output == "jsonl" {
            println!("{rec}");
        }
        Ok(())
    })?;
    if a.output == "json" {
        let records: Vec<&serde_json::Value> = results.iter().map(|m| &m.record).collect();
        println!("{}", serde_json::to_string_pretty(&records)?);
    }
    Ok(())
}

/// The dominant weight type of a model, for the `model` column.
fn infr_quant_name(w: &infr_core::GgufWeights) -> String {
    let mut counts = std::collections::HashMap::new();
    for t in w.gguf().tensors() {
        *counts.entry(t.info.ty).or_insert(0u64) += t.info.size;
    }
    counts.into_iter().max_by_key(|(_, b)| *b).map(|(t, _)| t.to_string().to_uppercase()).unwrap_or_default()
}
