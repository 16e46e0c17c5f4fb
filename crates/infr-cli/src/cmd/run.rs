//! `infr run`: one-shot generation with a prompt, or an interactive chat without one.
//!
//! A model with a chat template gets its prompt wrapped in that template (like llama.cpp's
//! conversation mode); `--raw` or a model without a template continues the text as given.
//! Ctrl-C stops the reply being generated; at the input prompt it ends the program.
//! Replies are decoded by the scheduler that `infr serve` runs (one slot here), so both take
//! the same path; a diffusion model denoises canvases on the runner itself.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use infr_engine::{
    Event, Request, RequestError, Runner, RunnerOptions, SamplingParams, Scheduler, SchedulerHandle, SchedulerOptions,
    SeqId,
};
use infr_tokenizer::chat::{special_token_text, ChatMessage, ChatRequest, ChatTemplate};
use infr_tokenizer::{StreamDecoder, Tokenizer};

use crate::load::{self, DeviceArgs};

/// Arguments of `infr run` (sampling flags named as llama.cpp's).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model: a .gguf path or `org/repo[:quant]` (pulled into the Hugging Face cache when missing).
    pub model: String,
    /// Prompt; without one, an interactive chat starts.
    pub prompt: Option<String>,
    /// Most tokens to generate per reply (-1: until end of generation or a full context).
    /// Config key `sampling.max_tokens`.
    #[arg(short = 'n', long = "n-predict", allow_negative_numbers = true)]
    pub n_predict: Option<i64>,
    /// Context size: tokens (`8192`, `32k`), `0` for the model's trained context, or `50%` of
    /// the device memory left after the weights (default 4096; config key `context.size`,
    /// env `INFR_CTX`).
    #[arg(short = 'c', long = "ctx-size", visible_alias = "ctx")]
    pub ctx: Option<String>,
    /// System message for chat templates.
    #[arg(long, visible_alias = "sys")]
    pub system: Option<String>,
    /// Do not apply the chat template: continue the prompt text as is.
    #[arg(long)]
    pub raw: bool,
    /// Temperature, 0 = greedy (default 0.8).
    #[arg(long = "temp", visible_alias = "temperature")]
    pub temperature: Option<f32>,
    /// Top-k, 0 disables (default 40).
    #[arg(long)]
    pub top_k: Option<i32>,
    /// Top-p, 1 disables (default 0.95).
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Min-p, 0 disables (default 0.05).
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Repetition penalty, 1 disables.
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// Tokens of history the penalties look at (-1: all).
    #[arg(long, allow_negative_numbers = true)]
    pub repeat_last_n: Option<i32>,
    /// Presence penalty.
    #[arg(long, allow_negative_numbers = true)]
    pub presence_penalty: Option<f32>,
    /// Frequency penalty.
    #[arg(long, allow_negative_numbers = true)]
    pub frequency_penalty: Option<f32>,
    /// RNG seed (default: from the clock).
    #[arg(long, short = 's')]
    pub seed: Option<u64>,
    /// Prefill chunk size (default 512).
    #[arg(long = "ub", visible_alias = "ubatch-size")]
    pub ubatch: Option<u32>,
    /// KV cache type: f16 (default), f32, q8_0.
    #[arg(long = "ctk", visible_aliases = ["cache-type-k", "kv-type"])]
    pub kv_type: Option<String>,
    #[command(flatten)]
    pub diffusion: super::diffusion::DiffusionArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
}

impl Args {
    /// The resolved configuration with this command's flags on top.
    fn config(&self) -> Result<infr_config::Config> {
        let mut f = load::Flags::default();
        f.opt("sampling.max_tokens", "--n-predict", self.n_predict);
        f.opt("context.size", "--ctx-size", self.ctx.clone());
        f.opt("context.ubatch", "--ubatch-size", self.ubatch);
        f.opt("sampling.temperature", "--temp", self.temperature.map(f64::from).map(|v| v.to_string()));
        f.opt("sampling.top_k", "--top-k", self.top_k);
        f.opt("sampling.top_p", "--top-p", self.top_p.map(|v| v.to_string()));
        f.opt("sampling.min_p", "--min-p", self.min_p.map(|v| v.to_string()));
        f.opt("sampling.repeat_penalty", "--repeat-penalty", self.repeat_penalty.map(|v| v.to_string()));
        f.opt("sampling.repeat_last_n", "--repeat-last-n", self.repeat_last_n);
        f.opt("sampling.presence_penalty", "--presence-penalty", self.presence_penalty.map(|v| v.to_string()));
        f.opt("sampling.frequency_penalty", "--frequency-penalty", self.frequency_penalty.map(|v| v.to_string()));
        f.opt("sampling.seed", "--seed", self.seed);
        f.opt("kv.type", "--cache-type-k", self.kv_type.clone());
        self.device.resolve(f)
    }
}

/// Sampling settings from the configuration.
pub fn sampling_of(cfg: &infr_config::Config) -> SamplingParams {
    SamplingParams {
        temperature: cfg.sampling.temperature,
        top_k: cfg.sampling.top_k,
        top_p: cfg.sampling.top_p,
        min_p: cfg.sampling.min_p,
        repeat_penalty: cfg.sampling.repeat_penalty,
        repeat_last_n: cfg.sampling.repeat_last_n,
        presence_penalty: cfg.sampling.presence_penalty,
        frequency_penalty: cfg.sampling.frequency_penalty,
        seed: match cfg.sampling.seed {
            infr_config::Seed::Fixed(s) => Some(s),
            infr_config::Seed::Random => None,
        },
        logit_bias: Vec::new(),
    }
}

/// State shared with the Ctrl-C handler.
#[derive(Default)]
struct Interrupt {
    generating: AtomicBool,
    stop: AtomicBool,
}

/// Run `infr run`.
pub fn run(a: Args) -> Result<()> {
    let cfg = a.config()?;
    let w = load::open_path(&load::model_path_with(&a.model, &cfg)?)?;
    let tok = load::tokenizer(&w)?;
    let meta = infr_core::WeightSource::metadata(&w);
    let template = if a.raw {
        None
    } else {
        let bos = special_token_text(meta, "tokenizer.ggml.bos_token_id")?.unwrap_or_default();
        let eos = special_token_text(meta, "tokenizer.ggml.eos_token_id")?.unwrap_or_default();
        ChatTemplate::from_metadata(meta, &bos, &eos)?
    };
    let sampling = sampling_of(&cfg);
    sampling.validate()?;
    let opts = RunnerOptions {
        n_seq: 1,
        ubatch: cfg.context.ubatch as usize,
        kv_dtype: load::kv_of(&cfg),
        ..Default::default()
    };
    let runner = load::runner_with_context(&w, &a.device, &cfg, cfg.context.size, opts)?;
    let n_ctx = runner.options().n_ctx;
    let name = runner.model().info.name.clone().unwrap_or_else(|| a.model.clone());
    eprintln!("{name} on {} ({})", runner.device().id, runner.device().name);

    let interrupt = Arc::new(Interrupt::default());
    {
        let interrupt = interrupt.clone();
        ctrlc::set_handler(move || {
            if interrupt.generating.load(Ordering::SeqCst) {
                interrupt.stop.store(true, Ordering::SeqCst);
            } else {
                eprintln!();
                let _ = std::io::stdout().flush();
                // Ended as an unhandled SIGINT would end it: without the process's exit
                // handlers, which would tear the GPU driver down under the scheduler thread
                // that still owns the device (a crash on NVIDIA's). The normal end of `run`
                // waits for that thread instead.
                // SAFETY: `_exit` only ends the process; nothing runs after it.
                unsafe { libc::_exit(130) };
            }
        })?;
    }
    let mut engine = match runner.model().diffusion() {
        Some(p) => {
            let reply = super::diffusion::Reply {
                tok: &tok,
                params: a.diffusion.params(p)?,
                // A canvas at a time: -1 (until the end) is bounded by the context.
                max_new_tokens: usize::try_from(cfg.sampling.max_tokens).unwrap_or(n_ctx),
                seed: sampling.seed,
                visual: a.diffusion.diffusion_visual,
            };
            eprintln!(
                "block diffusion: canvases of {} tokens, up to {} steps each",
                reply.params.canvas_length, reply.params.max_denoising_steps
            );
            let mut runner = Box::new(runner);
            let seq = runner.add_sequence();
            Engine::Diffusion { runner, seq, reply }
        }
        None => {
            // One slot, plans built as shapes come (a one-shot run should not wait for every
            // serving shape), and no deadline: a long generation on a CPU may take minutes.
            let opts = SchedulerOptions { default_timeout: None, prepare_plans: false, ..Default::default() };
            Engine::Scheduler(Scheduler::spawn(runner, opts)?)
        }
    };
    let base = Request {
        max_tokens: usize::try_from(cfg.sampling.max_tokens).ok(),
        sampling: sampling.clone(),
        ..Request::new(Vec::new(), tok.eog_ids().to_vec())
    };
    let mut reply = |prompt: &[u32]| -> Result<String> {
        interrupt.stop.store(false, Ordering::SeqCst);
        interrupt.generating.store(true, Ordering::SeqCst);
        let stop = || interrupt.stop.load(Ordering::SeqCst);
        let r = match &mut engine {
            Engine::Diffusion { runner, seq, reply } => super::diffusion::reply(runner, *seq, prompt, reply, &stop)
                .map(|(text, out)| {
                    super::diffusion::print_stats(prompt.len(), &out);
                    text
                }),
            Engine::Scheduler(h) => stream_reply(h, Request { prompt: prompt.to_vec(), ..base.clone() }, &tok, &stop),
        };
        interrupt.generating.store(false, Ordering::SeqCst);
        r
    };

    let outcome = converse(&a, template.as_ref(), &tok, n_ctx, &mut reply);
    // The scheduler thread owns the GPU backend: a process that exits while it still tears
    // the device down can crash in the driver (NVIDIA: a segfault or abort after the reply of
    // a 30B model). Close its queue and wait for it, as `serve` does.
    if let Engine::Scheduler(h) = engine {
        let thread = h.thread();
        drop(h);
        if !thread.wait(std::time::Duration::from_secs(30)) {
            tracing::warn!("the scheduler thread did not stop within 30 s");
        }
    }
    outcome
}

/// The one-shot reply to the prompt, or the interactive chat, through `reply` (a prompt's
/// token ids to the reply's text).
fn converse(
    a: &Args,
    template: Option<&ChatTemplate>,
    tok: &Tokenizer,
    n_ctx: usize,
    reply: &mut dyn FnMut(&[u32]) -> Result<String>,
) -> Result<()> {
    match (&a.prompt, template) {
        (Some(p), None) => {
            let ids = tok.encode(p, true, true);
            print!("{p}");
            reply(&ids)?;
        }
        (Some(p), Some(t)) => {
            let messages = initial_messages(&a.system, p);
            let ids = encode_chat(tok, t, &messages)?;
            reply(&ids)?;
        }
        (None, template) => {
            let Some(t) = template else {
                bail!("this model has no chat template: give a prompt to continue, e.g. `infr run MODEL \"Once upon a time\"`")
            };
            eprintln!("chat with the model; Ctrl-C stops a reply, Ctrl-C at the prompt or Ctrl-D ends");
            let mut messages: Vec<ChatMessage> = Vec::new();
            if let Some(s) = &a.system {
                messages.push(ChatMessage::new("system", s));
            }
            let stdin = std::io::stdin();
            loop {
                eprint!("> ");
                let mut line = String::new();
                if stdin.lock().read_line(&mut line)? == 0 {
                    break;
                }
                let line = line.trim_end_matches(['\n', '\r']);
                if line.trim().is_empty() {
                    continue;
                }
                messages.push(ChatMessage::new("user", line));
                let ids = encode_chat(tok, t, &messages)?;
                if ids.len() >= n_ctx {
                    eprintln!("the conversation ({} tokens) no longer fits the context ({}); start again with a larger --ctx-size", ids.len(), n_ctx);
                    messages.pop();
                    continue;
                }
                let text = reply(&ids)?;
                messages.push(ChatMessage::new("assistant", &text));
            }
        }
    }
    Ok(())
}

fn initial_messages(system: &Option<String>, user: &str) -> Vec<ChatMessage> {
    let mut m = Vec::new();
    if let Some(s) = system {
        m.push(ChatMessage::new("system", s));
    }
    m.push(ChatMessage::new("user", user));
    m
}

/// Render the conversation with the template and tokenize it (the template's special tokens
/// parsed, the typed text never; BOS added only when the template did not already write it).
fn encode_chat(tok: &Tokenizer, t: &ChatTemplate, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    Ok(t.render_tokens(tok, ChatRequest::new(messages.to_vec()), |_| {})?.ids)
}

/// Where `infr run`'s replies come from.
enum Engine<'t> {
    /// The serving scheduler with one slot (its sequence keeps the conversation's cache).
    Scheduler(SchedulerHandle),
    /// A diffusion model's canvases, denoised on the runner itself.
    Diffusion { runner: Box<Runner>, seq: SeqId, reply: super::diffusion::Reply<'t> },
}

/// Submit `req` to the scheduler, print its text as it streams, then the statistics line;
/// `stop()` (Ctrl-C) cancels it. Returns the text.
fn stream_reply(h: &SchedulerHandle, req: Request, tok: &Tokenizer, stop: &dyn Fn() -> bool) -> Result<String> {
    let rx = h.submit_channel(req).map_err(|e| {
        // The raw prompt was echoed without a newline.
        println!();
        match e {
            RequestError::PromptTooLong { .. } => anyhow!("{e}: raise --ctx-size or shorten the prompt"),
            e => anyhow!("{e}"),
        }
    })?;
    let mut dec = StreamDecoder::new(tok);
    let mut text = String::new();
    let mut out = std::io::stdout().lock();
    let (mut prompt, mut cached, mut generated) = (0usize, 0usize, 0usize);
    let (mut started, mut first) = (Instant::now(), None);
    let finish = loop {
        if stop() {
            break "Cancelled".to_owned();
        }
        // A short wait, so that Ctrl-C during a long prompt is noticed.
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(Event::Started(s)) => {
                (prompt, cached, started) = (s.prompt_tokens, s.cached_tokens, Instant::now());
            }
            Ok(Event::Token(t)) => {
                first.get_or_insert_with(Instant::now);
                generated += 1;
                let piece = dec.push(t);
                if !piece.is_empty() {
                    text.push_str(&piece);
                    let _ = out.write_all(piece.as_bytes());
                    let _ = out.flush();
                }
            }
            Ok(Event::Logprob(_)) | Err(RecvTimeoutError::Timeout) => {}
            Ok(Event::Done(d)) => break format!("{:?}", d.finish),
            Ok(Event::Error(e)) => bail!("{e}"),
            Err(RecvTimeoutError::Disconnected) => bail!("the scheduler stopped"),
        }
    };
    // Dropping the receiver cancels a request still running.
    drop(rx);
    let end = Instant::now();
    let rest = dec.flush();
    text.push_str(&rest);
    let _ = out.write_all(rest.as_bytes());
    let _ = writeln!(out);
    let first = first.unwrap_or(end);
    let computed = prompt - cached;
    let prefill = first.duration_since(started).as_secs_f64().max(1e-9);
    let decode = end.duration_since(first).as_secs_f64().max(1e-9);
    eprintln!(
        "[prompt {prompt} tokens ({computed} computed) {:.1} t/s | generated {generated} tokens {:.1} t/s | {finish}]",
        computed as f64 / prefill,
        generated.saturating_sub(1) as f64 / decode,
    );
    Ok(text)
}
