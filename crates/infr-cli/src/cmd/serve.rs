//! `infr serve`: an OpenAI- and Anthropic-compatible HTTP server with continuous batching.
//!
//! `--parallel` slots share `--ctx-size` tokens of KV cache: each slot (one request at a
//! time) gets `ctx-size / parallel` tokens of context, as llama.cpp's `-np` does, so raising
//! `--parallel` never needs more memory. Per-request log lines come at `--log info`.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use infr_engine::{slot_runner_options, RunnerOptions, Scheduler, SchedulerOptions};
use infr_server::{ServerOptions, TextModel};
use infr_tokenizer::chat::ChatTemplate;

use crate::load::{self, DeviceArgs};

/// Arguments of `infr serve` (flags named as llama.cpp's `llama-server`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a .gguf path or `org/repo[:quant]` (pulled into the Hugging Face cache when missing).
    pub model: String,
    /// Address to listen on (loopback by default; use 0.0.0.0 to accept other machines).
    #[arg(long, default_value = "127.0.0.1", env = "INFR_HOST")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8080, env = "INFR_PORT")]
    pub port: u16,
    /// Requests served at once (slots); they share the context.
    #[arg(long, visible_alias = "np", default_value_t = 4)]
    pub parallel: usize,
    /// Total context in tokens, divided across the slots.
    #[arg(short = 'c', long = "ctx-size", visible_alias = "ctx", default_value_t = 4096)]
    pub ctx: usize,
    /// API key required on every route but /health (`Authorization: Bearer KEY` or `x-api-key`).
    #[arg(long, env = "INFR_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Name the model is served as (default: the file stem).
    #[arg(long, visible_alias = "served-model-name")]
    pub alias: Option<String>,
    /// Requests that may wait for a free slot before the server answers 503.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Longest a request may take, in seconds, queue wait included (0: no limit).
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Prefill chunk size (largest step).
    #[arg(long = "ub", visible_alias = "ubatch-size", default_value_t = 512)]
    pub ubatch: usize,
    /// Largest prompt chunk mixed into a step that also decodes other requests.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// KV cache type (f16, f32, q8_0).
    #[arg(long = "ctk", visible_alias = "cache-type-k", default_value = "f16")]
    pub kv_type: String,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Run `infr serve`.
pub fn run(a: Args) -> Result<()> {
    if a.parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if a.ctx / a.parallel < 16 {
        bail!("--ctx-size {} leaves {} tokens per slot with --parallel {}", a.ctx, a.ctx / a.parallel, a.parallel);
    }
    let path = load::model_path(&a.model)?;
    let w = load::open_weights(&path.to_string_lossy())?;
    let tok = load::tokenizer(&w)?;
    let meta = infr_core::WeightSource::metadata(&w);
    let template = ChatTemplate::for_model(meta).context("chat template")?;
    let base = RunnerOptions { ubatch: a.ubatch, kv_dtype: load::kv_dtype(&a.kv_type)?, ..Default::default() };
    let runner = load::runner(&w, &a.device, slot_runner_options(a.ctx, a.parallel, base))?;
    let device = format!("{} ({})", runner.device().id, runner.device().name);
    let sched_opts = SchedulerOptions {
        queue_capacity: a.queue.max(1),
        prefill_chunk: a.prefill_chunk.max(1),
        default_timeout: (a.timeout > 0).then(|| Duration::from_secs(a.timeout)),
    };
    let sched = Scheduler::spawn(runner, sched_opts)?;
    let model_id = a.alias.clone().unwrap_or_else(|| model_stem(&path));
    let opts = ServerOptions {
        model_id: model_id.clone(),
        model_path: path.display().to_string(),
        api_key: a.api_key.clone().filter(|k| !k.is_empty()),
        default_sampling: Default::default(),
    };
    let n_ctx = sched.n_ctx();
    let state = infr_server::state(sched, TextModel::new(tok, template), opts);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", a.host, a.port))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "{model_id} on {device}: {} slots x {n_ctx} tokens of context{}",
            a.parallel,
            if a.api_key.is_some() { ", API key required" } else { "" }
        );
        println!("listening on http://{addr}");
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
            eprintln!("shutting down");
        };
        infr_server::serve(listener, state, shutdown).await.context("server")
    })
}

/// The model id: the file name without `.gguf` (and without a `-00001-of-0000N` shard suffix).
fn model_stem(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    match stem.rfind("-00001-of-") {
        Some(i) => stem[..i].to_owned(),
        None => stem,
    }
}
