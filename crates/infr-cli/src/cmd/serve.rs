//! `infr serve`: an OpenAI- and Anthropic-compatible HTTP server with continuous batching.
//!
//! `--parallel` slots share `--ctx-size` tokens of KV cache: each slot (one request at a
//! time) gets `ctx-size / parallel` tokens of context, as llama.cpp's `-np` does, so raising
//! `--parallel` never needs more memory. Per-request log lines come at `--log info`.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use infr_engine::{RunnerOptions, Scheduler, SchedulerOptions};
use infr_server::{ReasoningFormat, ServerOptions, TextModel};
use infr_tokenizer::chat::ChatTemplate;

use crate::load::{self, DeviceArgs};

/// Arguments of `infr serve` (flags named as llama.cpp's `llama-server`).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a .gguf path or `org/repo[:quant]` (pulled into the Hugging Face cache when
    /// missing); also `-m`, or config key `model.path_or_ref`.
    pub model: Option<String>,
    /// The model, as llama-server's `-m` (same as the positional MODEL).
    #[arg(short = 'm', long = "model", conflicts_with = "model")]
    pub model_flag: Option<String>,
    /// Address to listen on (default 127.0.0.1, loopback; 0.0.0.0 accepts other machines).
    /// Config key `server.host`.
    #[arg(long)]
    pub host: Option<String>,
    /// Port to listen on (default 8080; 0 picks a free one). Config key `server.port`.
    #[arg(long)]
    pub port: Option<u16>,
    /// Requests served at once (slots, default 4); they share the context. Config key `server.parallel`.
    #[arg(long, visible_alias = "np")]
    pub parallel: Option<u32>,
    /// Total context, divided across the slots: tokens (`8192`, `32k`), `0` for the model's
    /// trained context, or `50%` of the device memory left after the weights (default 4096).
    /// Config key `context.size`.
    #[arg(short = 'c', long = "ctx-size", visible_alias = "ctx")]
    pub ctx: Option<String>,
    /// API key required on every route but /health (`Authorization: Bearer KEY` or `x-api-key`).
    /// Config key `server.api_key`, env `INFR_API_KEY`.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Name the model is served as (default: the file stem).
    #[arg(long, visible_alias = "served-model-name")]
    pub alias: Option<String>,
    /// Requests that may wait for a free slot before the server answers 503 (config `server.queue_size`).
    #[arg(long)]
    pub queue: Option<u32>,
    /// Longest a request may take, in seconds, queue wait included; 0: no limit (config `server.request_timeout_s`).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Prefill chunk size, the largest step (default 512; config `context.ubatch`).
    #[arg(long = "ub", visible_alias = "ubatch-size")]
    pub ubatch: Option<u32>,
    /// Largest prompt chunk mixed into a step that also decodes other requests.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Jinja chat template file used instead of the model's own (as llama-server's flag).
    /// Config key `server.chat_template_file`.
    #[arg(long)]
    pub chat_template_file: Option<String>,
    /// Serve Prometheus metrics at `GET /metrics` (needs the API key when one is set; config
    /// `server.metrics`).
    #[arg(long)]
    pub metrics: bool,
    /// Reasoning in replies (`<think>...</think>`): `none` leaves it in the content, `deepseek`
    /// moves it to `reasoning_content` / a `thinking` block, `auto` (default) does so too, and
    /// treats a prompt ending with `<think>` as open reasoning only for templates that use the
    /// tag. Config key `server.reasoning_format`.
    #[arg(long, value_parser = ["none", "deepseek", "auto"])]
    pub reasoning_format: Option<String>,
    /// KV cache type: f16 (default), f32, q8_0 (config `kv.type`).
    #[arg(long = "ctk", visible_aliases = ["cache-type-k", "kv-type"])]
    pub kv_type: Option<String>,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// Run `infr serve`.
pub fn run(a: Args) -> Result<()> {
    let mut f = load::Flags::default();
    f.opt("model.path_or_ref", "--model", a.model.clone().or_else(|| a.model_flag.clone()));
    f.opt("server.host", "--host", a.host.clone());
    f.opt("server.port", "--port", a.port);
    f.opt("server.parallel", "--parallel", a.parallel);
    f.opt("context.size", "--ctx-size", a.ctx.clone());
    f.opt("server.api_key", "--api-key", a.api_key.clone());
    f.opt("server.queue_size", "--queue", a.queue);
    f.opt("server.request_timeout_s", "--timeout", a.timeout);
    f.opt("context.ubatch", "--ubatch-size", a.ubatch);
    f.opt("kv.type", "--cache-type-k", a.kv_type.clone());
    f.opt("server.metrics", "--metrics", a.metrics.then_some(true));
    f.opt("server.reasoning_format", "--reasoning-format", a.reasoning_format.clone());
    f.opt("server.chat_template_file", "--chat-template-file", a.chat_template_file.clone());
    let cfg = a.device.resolve(f)?;
    let Some(model) = cfg.model.path_or_ref.clone() else {
        bail!("no model: give MODEL (a .gguf path or org/repo[:quant]), -m, or model.path_or_ref in infr.toml")
    };
    check_settings(&cfg)?;
    let (device, alias, chunk) = (a.device.clone(), a.alias.clone(), a.prefill_chunk);
    let load_cfg = cfg.clone();
    run_server(&cfg, move || {
        let m = load_model(&load_cfg, &device, &model, alias, chunk)?;
        Ok((vec![banner_line(&m, &load_cfg)], vec![m.thread.clone()], Routes::One(m.state)))
    })
}

/// What a server serves: one model's routes, or several behind the model-name router.
pub enum Routes {
    One(infr_server::SharedState),
    Many(Vec<(String, infr_server::SharedState)>),
}

/// What loading the models gives: the start-up lines, the scheduler threads, the routes.
pub type Loaded = (Vec<String>, Vec<infr_engine::SchedulerThread>, Routes);

/// The start-up line of a model.
pub fn banner_line(m: &ServedModel, cfg: &infr_config::Config) -> String {
    format!(
        "{} on {}: {} slots x {} tokens of context{}{}",
        m.id,
        m.device,
        m.parallel,
        m.n_ctx,
        if cfg.server.api_key.is_some() { ", API key required" } else { "" },
        if cfg.server.metrics { ", metrics at /metrics" } else { "" }
    )
}

/// Listen on the configured address at once (`/health` answers 503 "loading" meanwhile), run
/// `load` on a blocking thread, then serve what it returns until SIGINT/SIGTERM, drain
/// gracefully (a second signal exits at once) and wait for the schedulers to stop. The
/// "listening on" line is printed when the models are ready.
pub fn run_server(cfg: &infr_config::Config, load: impl FnOnce() -> Result<Loaded> + Send + 'static) -> Result<()> {
    // A server writes to sockets and to its template worker's pipe: a peer that went away must
    // be an error to handle, not a signal that ends the process (main restores SIGPIPE's
    // default for the other commands' piped output).
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to ignore is always valid.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let (host, port) = (cfg.server.host.clone(), cfg.server.port);
    let grace = Duration::from_secs(cfg.server.shutdown_grace_s);
    let threads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let held = threads.clone();
    let served = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind((host.as_str(), port))
            .await
            .with_context(|| format!("cannot listen on {host}:{port}"))?;
        let addr = listener.local_addr()?;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let announce = {
            let lines = lines.clone();
            // Printed once the model's routes answer: the line means "ready".
            move || {
                for line in lines.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default() {
                    eprintln!("{line}");
                }
                println!("listening on http://{addr}");
            }
        };
        let load = move || -> std::result::Result<infr_server::loading::Ready, String> {
            let (banner, ts, routes) = load().map_err(|e| format!("{e:#}"))?;
            if let Ok(mut t) = held.lock() {
                t.extend(ts);
            }
            if let Ok(mut l) = lines.lock() {
                *l = banner;
            }
            Ok(match routes {
                Routes::One(state) => infr_server::loading::Ready::one(state),
                Routes::Many(models) => infr_server::loading::Ready::many(models),
            })
        };
        let shutdown = async move {
            let first = shutdown_signal().await;
            eprintln!(
                "{first}: shutting down (running requests get {} s; queued ones are refused; {first} again exits at once)",
                grace.as_secs()
            );
            tokio::spawn(async {
                let again = shutdown_signal().await;
                eprintln!("{again}: exiting now");
                std::process::exit(130);
            });
        };
        infr_server::loading::serve_while_loading(listener, load, announce, shutdown, Some(grace))
            .await
            .map_err(|e| anyhow::anyhow!(e))
    });
    // Requests still held by runtime tasks go with the runtime; then the scheduler threads
    // drop the backends before the process exits. Stopped while still loading: do not wait
    // for the load (a download or an upload can take minutes).
    let loaded = threads.lock().map(|t| !t.is_empty()).unwrap_or(true);
    if loaded {
        drop(rt);
    } else {
        rt.shutdown_background();
    }
    for t in threads.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default() {
        if !t.wait(std::time::Duration::from_secs(30)) {
            tracing::warn!("a scheduler did not stop within 30 s; exiting anyway");
        }
    }
    served
}

/// One model made ready to serve: its id, state, device, per-slot context and slots.
pub struct ServedModel {
    pub id: String,
    pub state: infr_server::SharedState,
    pub device: String,
    pub n_ctx: usize,
    pub parallel: usize,
    pub thread: infr_engine::SchedulerThread,
}

/// Check the serving settings of `cfg` (a real API key when one is set, slots, context).
pub fn check_settings(cfg: &infr_config::Config) -> Result<()> {
    // An empty key (`--api-key ''`, `INFR_API_KEY=`) would leave the server open while the
    // user believes it is protected: refuse to start.
    if cfg.server.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        bail!("server.api_key is set but empty: give a real key, or unset it to serve without authentication");
    }
    let parallel = cfg.server.parallel as usize;
    if parallel == 0 {
        bail!("--parallel must be at least 1");
    }
    if let infr_config::ContextSize::Tokens(n) = cfg.context.size {
        let per_slot = n as usize / parallel;
        if n > 0 && per_slot < 16 {
            bail!("--ctx-size {n} leaves {per_slot} tokens per slot with --parallel {parallel}");
        }
    }
    Ok(())
}

/// Load `model` (a path or `org/repo[:quant]`) with the settings of `cfg` on its device and
/// start its scheduler; `alias` names it (default: the file's stem).
pub fn load_model(
    cfg: &infr_config::Config,
    device: &DeviceArgs,
    model: &str,
    alias: Option<String>,
    prefill_chunk: usize,
) -> Result<ServedModel> {
    check_settings(cfg)?;
    let parallel = cfg.server.parallel as usize;
    let path = load::model_path_with(model, cfg)?;
    let w = load::open_path(&path)?;
    let tok = load::tokenizer(&w)?;
    let meta = infr_core::WeightSource::metadata(&w);
    let template = match &cfg.server.chat_template_file {
        Some(file) => {
            let src = std::fs::read_to_string(file).with_context(|| format!("reading chat template {file}"))?;
            let text = |id: Option<u32>| id.map_or("", |i| tok.token_text(i));
            ChatTemplate::new(&src, text(tok.bos()), text(tok.eos()))
                .with_context(|| format!("chat template {file}"))?
        }
        None => ChatTemplate::for_model(meta).context("chat template")?,
    };
    let base = RunnerOptions {
        n_seq: parallel,
        ubatch: cfg.context.ubatch as usize,
        kv_dtype: load::kv_of(cfg),
        ..Default::default()
    };
    let runner = load::runner_with_context(&w, device, cfg, cfg.context.size, base)?;
    let device = format!("{} ({})", runner.device().id, runner.device().name);
    let sched_opts = SchedulerOptions {
        queue_capacity: (cfg.server.queue_size as usize).max(1),
        prefill_chunk: prefill_chunk.max(1),
        default_timeout: (cfg.server.request_timeout_s > 0).then(|| Duration::from_secs(cfg.server.request_timeout_s)),
        prepare_plans: true,
    };
    let sched = Scheduler::spawn(runner, sched_opts)?;
    let id = alias.unwrap_or_else(|| model_stem(&path));
    let opts = ServerOptions {
        model_id: id.clone(),
        model_path: path.display().to_string(),
        api_key: cfg.server.api_key.clone(),
        default_sampling: crate::cmd::run::sampling_of(cfg),
        reasoning_format: match cfg.server.reasoning_format {
            infr_config::ReasoningFormat::None => ReasoningFormat::None,
            infr_config::ReasoningFormat::Deepseek => ReasoningFormat::Deepseek,
            infr_config::ReasoningFormat::Auto => ReasoningFormat::Auto,
        },
        metrics: cfg.server.metrics,
    };
    let n_ctx = sched.n_ctx();
    let thread = sched.thread();
    let state = infr_server::state(sched, TextModel::new(tok, template), opts);
    Ok(ServedModel { id, state, device, n_ctx, parallel, thread })
}

/// The first of SIGINT and SIGTERM (Ctrl-C only where there are no Unix signals); its name.
pub async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => tokio::select! {
                _ = int.recv() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            _ => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

/// The model id: the file name without `.gguf` (and without a `-00001-of-0000N` shard suffix).
fn model_stem(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    match stem.rfind("-00001-of-") {
        Some(i) => stem[..i].to_owned(),
        None => stem,
    }
}
