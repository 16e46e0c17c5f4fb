//! A single-sequence generation loop (for `infr run` and tests); the server's scheduler
//! batches many sequences instead.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::sampling::Scores;
use crate::{EngineError, Runner, Sampler, SeqId, StepItem};

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token was sampled (not emitted).
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The callback asked to stop (stop string, user interrupt, client gone).
    Cancelled,
    /// The context is full.
    ContextFull,
}

/// What the per-token callback wants next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// Timings and counts of one generation.
#[derive(Debug, Clone, Copy)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens actually computed (the rest were already cached).
    pub prompt_computed: usize,
    pub generated: usize,
    pub prefill_time: Duration,
    pub decode_time: Duration,
    pub finish: FinishReason,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prefill_tps(&self) -> f64 {
        self.prompt_computed as f64 / self.prefill_time.as_secs_f64().max(1e-9)
    }

    /// Generated tokens per second (excluding the first token, which came from the prefill).
    pub fn decode_tps(&self) -> f64 {
        self.generated.saturating_sub(1) as f64 / self.decode_time.as_secs_f64().max(1e-9)
    }
}

/// Generation limits.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// Most tokens to generate (`None`: until EOG or the context is full).
    pub max_tokens: Option<usize>,
    /// Tokens that end generation.
    pub stop_ids: HashSet<u32>,
}

/// Length of the common prefix of two token lists.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Generate from `prompt` on `seq`, reusing whatever prefix of it is already cached (so a
/// chat only computes its new turn). `on_token` receives each new token.
pub fn generate(
    runner: &mut Runner,
    seq: SeqId,
    prompt: &[u32],
    sampler: &mut Sampler,
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> Flow,
) -> Result<GenerationStats, EngineError> {
    if prompt.is_empty() {
        return Err(EngineError::Invalid("empty prompt".into()));
    }
    let n_ctx = runner.options().n_ctx;
    if prompt.len() >= n_ctx {
        return Err(EngineError::ContextFull { needed: prompt.len() + 1, n_ctx });
    }
    // Keep the cached prefix, but always recompute at least the last prompt token for logits.
    let cached = common_prefix(runner.seq_tokens(seq)?, prompt).min(prompt.len() - 1);
    let cached = runner.truncate(seq, cached)?;
    let t0 = Instant::now();
    let mut scores = Scores::Full(runner.prefill(seq, &prompt[cached..], false)?);
    runner.snapshot(seq)?;
    let prefill_time = t0.elapsed();
    let mut history: Vec<u32> = prompt.to_vec();
    let mut generated = 0;
    let t1 = Instant::now();
    let finish = loop {
        if opts.max_tokens == Some(0) {
            break FinishReason::Length;
        }
        let tok = match &scores {
            Scores::Full(logits) => sampler.sample(logits, &history),
            Scores::Top(top) => sampler.sample_top(top),
        };
        if opts.stop_ids.contains(&tok) {
            break FinishReason::Stop;
        }
        generated += 1;
        history.push(tok);
        if on_token(tok) == Flow::Stop {
            break FinishReason::Cancelled;
        }
        if opts.max_tokens.is_some_and(|m| generated >= m) {
            break FinishReason::Length;
        }
        if history.len() >= n_ctx {
            break FinishReason::ContextFull;
        }
        let item = [StepItem { seq, tokens: &[tok], all_logits: false }];
        scores = match sampler.selection(&history) {
            Some((k, adjust)) => {
                let rows = runner.step_top_k(&item, k, &[adjust])?;
                Scores::top(rows.into_iter().next().and_then(|r| r.into_iter().next()))?
            }
            None => Scores::Full(runner.step(&item)?.into_iter().next().expect("one item")),
        };
    };
    Ok(GenerationStats {
        prompt_tokens: prompt.len(),
        prompt_computed: prompt.len() - cached,
        generated,
        prefill_time,
        decode_time: t1.elapsed(),
        finish,
    })
}
