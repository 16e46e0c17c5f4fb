//! `infr run`: one-shot generation with a prompt, or an interactive chat without one.
//!
//! A model with a chat template gets its prompt wrapped in that template (like llama.cpp's
//! conversation mode); `--raw` or a model without a template continues the text as given.
//! Ctrl-C stops the reply being generated; at the input prompt it ends the program.

use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Result};
use infr_engine::{generate, Flow, GenerateOptions, GenerationStats, RunnerOptions, Sampler, SamplingParams};
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
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Context size in tokens.
    #[arg(short = 'c', long = "ctx-size", visible_alias = "ctx", default_value_t = 4096)]
    pub ctx: usize,
    /// System message for chat templates.
    #[arg(long, short = 's')]
    pub system: Option<String>,
    /// Do not apply the chat template: continue the prompt text as is.
    #[arg(long)]
    pub raw: bool,
    /// Temperature (0 = greedy).
    #[arg(long = "temp", visible_alias = "temperature", default_value_t = 0.8)]
    pub temperature: f32,
    /// Top-k (0 disables).
    #[arg(long, default_value_t = 40)]
    pub top_k: i32,
    /// Top-p (1 disables).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0 disables).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1 disables).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens of history the penalties look at (-1: all).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i32,
    /// Presence penalty.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Frequency penalty.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// RNG seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Prefill chunk size.
    #[arg(long = "ub", visible_alias = "ubatch-size", default_value_t = 512)]
    pub ubatch: usize,
    /// KV cache type (f16, f32, q8_0).
    #[arg(long = "ctk", visible_alias = "cache-type-k", default_value = "f16")]
    pub kv_type: String,
    #[command(flatten)]
    pub device: DeviceArgs,
}

impl Args {
    fn sampling(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
        }
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
    let w = load::open_weights(&a.model)?;
    let tok = load::tokenizer(&w)?;
    let meta = infr_core::WeightSource::metadata(&w);
    let template = if a.raw {
        None
    } else {
        let bos = special_token_text(meta, "tokenizer.ggml.bos_token_id")?.unwrap_or_default();
        let eos = special_token_text(meta, "tokenizer.ggml.eos_token_id")?.unwrap_or_default();
        ChatTemplate::from_metadata(meta, &bos, &eos)?
    };
    let sampling = a.sampling();
    sampling.validate()?;
    let opts = RunnerOptions {
        n_ctx: a.ctx,
        n_seq: 1,
        ubatch: a.ubatch,
        kv_dtype: load::kv_dtype(&a.kv_type)?,
        ..Default::default()
    };
    let mut runner = load::runner(&w, &a.device, opts)?;
    let seq = runner.add_sequence();
    let mut sampler = Sampler::new(sampling);
    let gen_opts = GenerateOptions {
        max_tokens: usize::try_from(a.n_predict).ok(),
        stop_ids: tok.eog_ids().iter().copied().collect(),
    };
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
                std::process::exit(130);
            }
        })?;
    }
    let mut reply = |prompt: &[u32], runner: &mut infr_engine::Runner| -> Result<(String, GenerationStats)> {
        let mut dec = StreamDecoder::new(&tok);
        let mut text = String::new();
        let mut out = std::io::stdout().lock();
        interrupt.stop.store(false, Ordering::SeqCst);
        interrupt.generating.store(true, Ordering::SeqCst);
        let stats = generate(runner, seq, prompt, &mut sampler, &gen_opts, |t| {
            let piece = dec.push(t);
            if !piece.is_empty() {
                text.push_str(&piece);
                let _ = out.write_all(piece.as_bytes());
                let _ = out.flush();
            }
            if interrupt.stop.load(Ordering::SeqCst) {
                Flow::Stop
            } else {
                Flow::Continue
            }
        });
        interrupt.generating.store(false, Ordering::SeqCst);
        let rest = dec.flush();
        text.push_str(&rest);
        let _ = out.write_all(rest.as_bytes());
        let _ = writeln!(out);
        Ok((text, stats?))
    };

    match (&a.prompt, &template) {
        (Some(p), None) => {
            let ids = tok.encode(p, true, true);
            print!("{p}");
            let (_, stats) = reply(&ids, &mut runner)?;
            print_stats(&stats);
        }
        (Some(p), Some(t)) => {
            let messages = initial_messages(&a.system, p);
            let ids = encode_chat(&tok, t, &messages)?;
            let (_, stats) = reply(&ids, &mut runner)?;
            print_stats(&stats);
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
                let ids = encode_chat(&tok, t, &messages)?;
                if ids.len() >= a.ctx {
                    eprintln!("the conversation ({} tokens) no longer fits the context ({}); start again with a larger --ctx-size", ids.len(), a.ctx);
                    messages.pop();
                    continue;
                }
                let (text, stats) = reply(&ids, &mut runner)?;
                messages.push(ChatMessage::new("assistant", &text));
                print_stats(&stats);
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

/// Render the conversation with the template and tokenize it (special tokens parsed; BOS added
/// only when the template did not already write it).
fn encode_chat(tok: &Tokenizer, t: &ChatTemplate, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    let req = ChatRequest::new(messages.to_vec());
    let text = t.render(&req)?;
    let mut ids = tok.encode(&text, true, true);
    // A template that writes the BOS text itself would give two BOS tokens (llama.cpp removes the extra one).
    if let Some(bos) = tok.bos() {
        if ids.len() >= 2 && ids[0] == bos && ids[1] == bos {
            ids.remove(0);
        }
    }
    Ok(ids)
}

fn print_stats(s: &GenerationStats) {
    eprintln!(
        "[prompt {} tokens ({} computed) {:.1} t/s | generated {} tokens {:.1} t/s | {:?}]",
        s.prompt_tokens,
        s.prompt_computed,
        s.prefill_tps(),
        s.generated,
        s.decode_tps(),
        s.finish
    );
}
