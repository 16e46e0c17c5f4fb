//! Block diffusion generation (DiffusionGemma), after transformers'
//! `DiffusionGemmaGenerationMixin.generate` (5.24):
//!
//! 1. the encoder (the model's causal pass) writes the prompt's KV cache;
//! 2. a canvas of `canvas_length` uniformly random tokens is refined over at most
//!    `max_denoising_steps` denoiser passes. Each pass scales the logits by a temperature
//!    falling linearly from `t_max` to `t_min` (`LinearTemperatureScheduleLogitsProcessor`),
//!    draws one token per row, and the entropy-bound sampler (`EntropyBoundSampler`,
//!    arXiv:2505.24857) accepts the lowest-entropy draws whose summed entropy, less the largest,
//!    stays within `entropy_bound`; the other rows are renoised with fresh random tokens. The
//!    step's probabilities feed the next pass (self-conditioning). A canvas stops early when its
//!    argmax has not changed for `stability_threshold` steps and the mean entropy is below
//!    `confidence_threshold` (`StableAndConfidentStoppingCriteria`);
//! 3. the last argmax canvas is committed: the encoder appends it, and the next canvas
//!    follows, until an end-of-sequence token or the token budget.

use infr_models::DiffusionParams;
use rayon::prelude::*;

use crate::runner::CanvasDraws;
use crate::sampling::Rng;
use crate::{EngineError, Runner, SeqId};

/// Where the sampler's randomness comes from: a seeded generator, or (in tests) the draws a
/// reference implementation made.
pub trait NoiseSource {
    /// `n` tokens drawn uniformly from `0..n_vocab`: a fresh canvas, or the renoise draw.
    fn uniform_tokens(&mut self, n: usize, n_vocab: usize) -> Vec<u32>;
    /// One token drawn from each row of `probs` (rows of `n_vocab` probabilities).
    fn categorical(&mut self, probs: &[f32], n_vocab: usize) -> Vec<u32>;
    /// The uniforms `categorical` would draw `n` rows with (inverse CDF, see [`draw_rows`]),
    /// taken from the source as `categorical` takes them, so that the draw can run where the
    /// probabilities are (the device). `None` (the default) for a source that picks tokens
    /// otherwise (a replay of another implementation's draws): the step then reads back the
    /// logits and calls `categorical`.
    fn row_uniforms(&mut self, n: usize) -> Option<Vec<f64>> {
        let _ = n;
        None
    }
}

/// [`NoiseSource`] from a seed (xoshiro256**, as the autoregressive sampler).
#[derive(Debug, Clone)]
pub struct SeededNoise(Rng);

impl SeededNoise {
    pub fn new(seed: u64) -> Self {
        Self(Rng::new(seed))
    }

    /// From `seed`, or from the clock without one (as [`crate::Sampler::new`]).
    pub fn from_seed_or_clock(seed: Option<u64>) -> Self {
        Self::new(seed.unwrap_or_else(crate::sampling::clock_seed))
    }
}

impl NoiseSource for SeededNoise {
    fn uniform_tokens(&mut self, n: usize, n_vocab: usize) -> Vec<u32> {
        (0..n).map(|_| (self.0.next_u64() % n_vocab as u64) as u32).collect()
    }

    fn categorical(&mut self, probs: &[f32], n_vocab: usize) -> Vec<u32> {
        let draws = self.row_uniforms(probs.len() / n_vocab.max(1)).expect("a seeded source has uniforms");
        draw_rows(probs, n_vocab, &draws)
    }

    fn row_uniforms(&mut self, n: usize) -> Option<Vec<f64>> {
        Some((0..n).map(|_| self.0.uniform()).collect())
    }
}

/// One token per row of `probs` (rows of `n_vocab`) by inverse CDF: the first whose running
/// sum exceeds the row's uniform times the row's total. Rows in parallel (a canvas is 256 rows
/// of a 262,144-token vocabulary).
pub fn draw_rows(probs: &[f32], n_vocab: usize, uniforms: &[f64]) -> Vec<u32> {
    probs
        .par_chunks(n_vocab.max(1))
        .zip(uniforms)
        .map(|(row, &u)| {
            let total: f64 = row.iter().map(|&p| p as f64).sum();
            let mut r = u * total;
            for (i, &p) in row.iter().enumerate() {
                r -= p as f64;
                if r < 0.0 {
                    return i as u32;
                }
            }
            // Rounding left a sliver: the last token with any mass.
            row.iter().rposition(|&p| p > 0.0).unwrap_or(0) as u32
        })
        .collect()
}

/// What a diffusion generation is asked for.
#[derive(Debug, Clone)]
pub struct DiffusionOptions {
    pub params: DiffusionParams,
    /// Token budget; whole canvases are generated (`ceil(max_new_tokens / canvas_length)`),
    /// never more than fit in the context after the prompt.
    pub max_new_tokens: usize,
    /// Tokens that end generation (the canvas is cut after the first one).
    pub eos: Vec<u32>,
}

/// One denoising step, as reported to the caller.
#[derive(Debug)]
pub struct DenoiseStep<'a> {
    /// Canvas index (0-based) and step within it (0-based).
    pub block: usize,
    pub step: usize,
    /// The canvas the denoiser saw.
    pub canvas_in: &'a [u32],
    /// Its raw logits (`canvas_len` rows of `n_vocab`); empty when the noise source gives
    /// uniforms ([`NoiseSource::row_uniforms`]): the runner then samples where the logits are.
    pub logits: &'a [f32],
    /// Each row's entropy under the step's temperature (the sampler's and the stopping rule's
    /// measure of confidence).
    pub entropy: &'a [f64],
    /// The draws, which rows were accepted, the argmax of the scaled logits, and the next
    /// canvas (accepted draws kept, the rest renoised), which the caller may change (an
    /// evaluation forcing a reference's trajectory).
    pub samples: &'a [u32],
    pub accepted: &'a [bool],
    pub argmax: &'a [u32],
    pub canvas_out: &'a mut Vec<u32>,
    /// Whether the stopping rule ended the canvas here.
    pub stop: bool,
}

/// Events of a diffusion generation.
#[derive(Debug)]
pub enum DiffusionEvent<'a> {
    Step(DenoiseStep<'a>),
    /// A canvas about to be committed: its tokens, cut after an end-of-sequence token. The
    /// caller may change them (cut at a stop string, or force a reference's tokens when
    /// evaluating); what it leaves is what the encoder appends, and generation ends after a
    /// canvas that holds an end-of-sequence token.
    Block {
        block: usize,
        tokens: &'a mut Vec<u32>,
    },
}

/// The result of a diffusion generation.
#[derive(Debug, Clone, Default)]
pub struct DiffusionOutput {
    /// Every committed token (the last canvas cut after its end-of-sequence token).
    pub tokens: Vec<u32>,
    /// Denoiser passes per canvas.
    pub steps: Vec<usize>,
    /// Whether an end-of-sequence token ended generation.
    pub hit_eos: bool,
    /// Seconds spent on the prompt (encoder) and on the canvases (decoder passes and the
    /// encoder passes of committed canvases).
    pub prompt_secs: f64,
    pub gen_secs: f64,
}

/// Tokens of the whole canvases of `len` that fit in a context of `n_ctx` after `used` tokens.
pub fn canvas_room(n_ctx: usize, used: usize, len: usize) -> usize {
    n_ctx.saturating_sub(used) / len * len
}

/// The temperature at step `cur_step` (counting down from `max_steps` to 1), in f32 as the
/// reference computes it.
pub fn temperature(p: &DiffusionParams, cur_step: usize) -> f32 {
    let frac = cur_step as f32 / p.max_denoising_steps as f32;
    p.t_min + (p.t_max - p.t_min) * frac
}

/// A denoiser step's logits (rows of `n_vocab`) at temperature `t`: the probabilities the
/// sampler draws from (and the next step is conditioned on), each row's entropy and argmax.
pub fn canvas_stats(logits: &[f32], t: f32, n_vocab: usize) -> (Vec<f32>, Vec<f64>, Vec<u32>) {
    let mut probs: Vec<f32> = logits.par_iter().map(|&x| x / t).collect();
    let (entropy, argmax) = row_stats(&mut probs, n_vocab);
    (probs, entropy, argmax)
}

/// Per row of `scaled` logits: softmax probabilities (written over the row), entropy, and
/// argmax (first index of the maximum). Rows in parallel: each is two passes of f64
/// exponentials over the vocabulary.
fn row_stats(scaled: &mut [f32], n_vocab: usize) -> (Vec<f64>, Vec<u32>) {
    scaled.par_chunks_mut(n_vocab).map(row_stat).unzip()
}

/// [`row_stats`] of one row.
fn row_stat(row: &mut [f32]) -> (f64, u32) {
    let (mut best, mut max) = (0usize, f32::NEG_INFINITY);
    for (i, &x) in row.iter().enumerate() {
        if x > max {
            (best, max) = (i, x);
        }
    }
    let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let lse = max as f64 + sum.ln();
    let mut h = 0.0;
    for x in row.iter_mut() {
        let logp = *x as f64 - lse;
        let p = logp.exp();
        h -= p * logp;
        *x = p as f32;
    }
    (h, best as u32)
}

/// The entropy-bound acceptance: the rows with the lowest entropies whose summed entropy,
/// less the largest of them, is within `bound` (always at least the lowest one).
pub fn accept_by_entropy(entropy: &[f64], bound: f32) -> Vec<bool> {
    let mut order: Vec<usize> = (0..entropy.len()).collect();
    order.sort_by(|&a, &b| entropy[a].total_cmp(&entropy[b]));
    let mut accepted = vec![false; entropy.len()];
    let mut cum = 0.0;
    for &i in &order {
        cum += entropy[i];
        // Sorted ascending, so the current entropy is the largest so far.
        if cum - entropy[i] <= bound as f64 {
            accepted[i] = true;
        }
    }
    accepted
}

/// The stable-and-confident stopping rule's memory of recent argmax canvases.
#[derive(Debug, Clone)]
pub struct StoppingRule {
    stability: usize,
    confidence: f64,
    history: std::collections::VecDeque<Vec<u32>>,
}

impl StoppingRule {
    pub fn new(p: &DiffusionParams) -> Self {
        Self {
            stability: p.stability_threshold,
            confidence: p.confidence_threshold as f64,
            history: Default::default(),
        }
    }

    /// Whether to stop after a step with this argmax canvas and these row entropies.
    pub fn update(&mut self, argmax: &[u32], entropy: &[f64]) -> bool {
        let stable = self.stability == 0
            || (self.history.len() == self.stability && self.history.iter().all(|h| h.as_slice() == argmax));
        if self.stability > 0 {
            if self.history.len() == self.stability {
                self.history.pop_front();
            }
            self.history.push_back(argmax.to_vec());
        }
        let mean = entropy.iter().sum::<f64>() / entropy.len().max(1) as f64;
        stable && mean < self.confidence
    }
}

/// Generate after `prompt` (appended to `seq`, which may already hold tokens) by block
/// diffusion; `on_event` sees every step and committed canvas and may stop generation by
/// returning `false`.
pub fn generate_diffusion(
    runner: &mut Runner,
    seq: SeqId,
    prompt: &[u32],
    opts: &DiffusionOptions,
    noise: &mut dyn NoiseSource,
    mut on_event: impl FnMut(DiffusionEvent<'_>) -> bool,
) -> Result<DiffusionOutput, EngineError> {
    let p = opts.params;
    let len = p.canvas_length;
    // Whole canvases that fit in the context after the prompt.
    let n_ctx = runner.options().n_ctx;
    let after_prompt = runner.seq_tokens(seq)?.len() + prompt.len();
    let room = canvas_room(n_ctx, after_prompt, len);
    if room == 0 {
        return Err(EngineError::ContextFull { needed: after_prompt + len, n_ctx });
    }
    let budget = opts.max_new_tokens.min(room);
    let t0 = std::time::Instant::now();
    runner.prefill(seq, prompt, false)?;
    let mut out = DiffusionOutput { prompt_secs: t0.elapsed().as_secs_f64(), ..Default::default() };
    let t1 = std::time::Instant::now();
    let n_blocks = budget.div_ceil(len);
    for block in 0..n_blocks {
        let mut on_step = |st: DenoiseStep<'_>| on_event(DiffusionEvent::Step(st));
        let canvas = denoise_canvas(runner, seq, block, &p, noise, &mut on_step)?;
        out.steps.push(canvas.steps);
        let cut = canvas.argmax.iter().position(|t| opts.eos.contains(t));
        let mut committed = canvas.argmax[..cut.map_or(len, |i| i + 1)].to_vec();
        let go_on = canvas.go_on && on_event(DiffusionEvent::Block { block, tokens: &mut committed });
        out.tokens.extend_from_slice(&committed);
        if committed.iter().any(|t| opts.eos.contains(t)) {
            out.hit_eos = true;
            break;
        }
        if !go_on || block + 1 == n_blocks || committed.is_empty() {
            break;
        }
        // The encoder appends the committed canvas before the next one.
        runner.prefill(seq, &committed, false)?;
    }
    out.gen_secs = t1.elapsed().as_secs_f64();
    Ok(out)
}

/// What one canvas's denoising produced.
#[derive(Debug, Clone)]
pub struct Canvas {
    /// The argmax of the last step's scaled logits: the tokens to commit.
    pub argmax: Vec<u32>,
    /// Denoiser passes run.
    pub steps: usize,
    /// False when the step callback asked to stop.
    pub go_on: bool,
}

/// Denoise one canvas after the tokens `seq` holds (which stay as they are): a fresh random
/// canvas, then up to `max_denoising_steps` denoiser passes with the sampler and the stopping
/// rule. `on_step` sees each step and may stop by returning `false`.
pub fn denoise_canvas(
    runner: &mut Runner,
    seq: SeqId,
    block: usize,
    p: &DiffusionParams,
    noise: &mut dyn NoiseSource,
    on_step: &mut dyn FnMut(DenoiseStep<'_>) -> bool,
) -> Result<Canvas, EngineError> {
    let (len, v) = (p.canvas_length, runner.n_vocab());
    let mut canvas = noise.uniform_tokens(len, v);
    let mut mix: Vec<f32> = Vec::new();
    let mut argmax = canvas.clone();
    let mut rule = StoppingRule::new(p);
    let mut steps = 0;
    for (step, cur_step) in (1..=p.max_denoising_steps).rev().enumerate() {
        let t = temperature(p, cur_step);
        // With uniforms, the backend samples (on the device where it can) and the logits stay
        // where they are; a replayed source gets the logits and picks from the probabilities.
        let (logits, probs, draws) = match noise.row_uniforms(len) {
            Some(u) => (Vec::new(), Vec::new(), runner.denoise_sampled(seq, &canvas, t, &u, step == 0)?),
            None => {
                let logits = runner.denoise(seq, &canvas, &mix)?;
                let (probs, entropy, argmax) = canvas_stats(&logits, t, v);
                let samples = noise.categorical(&probs, v);
                (logits, probs, CanvasDraws { entropy, argmax, samples })
            }
        };
        steps += 1;
        let CanvasDraws { entropy, argmax: new_argmax, samples } = draws;
        let accepted = accept_by_entropy(&entropy, p.entropy_bound);
        let renoise = noise.uniform_tokens(len, v);
        let mut next: Vec<u32> = (0..len).map(|i| if accepted[i] { samples[i] } else { renoise[i] }).collect();
        let stop = rule.update(&new_argmax, &entropy);
        let go_on = on_step(DenoiseStep {
            block,
            step,
            canvas_in: &canvas,
            logits: &logits,
            entropy: &entropy,
            samples: &samples,
            accepted: &accepted,
            argmax: &new_argmax,
            canvas_out: &mut next,
            stop,
        });
        if next.len() != len {
            return Err(EngineError::Invalid(format!("a canvas of {} tokens replaced one of {len}", next.len())));
        }
        argmax = new_argmax;
        canvas = next;
        // The step's probabilities condition the next pass (self-conditioning); a sampled
        // step left them with the runner.
        mix = probs;
        if !go_on {
            return Ok(Canvas { argmax, steps, go_on: false });
        }
        if stop {
            break;
        }
    }
    Ok(Canvas { argmax, steps, go_on: true })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> DiffusionParams {
        DiffusionParams {
            canvas_length: 4,
            max_denoising_steps: 10,
            t_min: 0.4,
            t_max: 0.8,
            entropy_bound: 0.5,
            stability_threshold: 2,
            confidence_threshold: 0.1,
        }
    }

    #[test]
    fn temperature_falls_linearly_to_t_min() {
        let p = params();
        assert!((temperature(&p, 10) - 0.8).abs() < 1e-6);
        assert!((temperature(&p, 5) - 0.6).abs() < 1e-6);
        assert!((temperature(&p, 1) - 0.44).abs() < 1e-6);
    }

    #[test]
    fn entropy_bound_accepts_the_lowest_within_the_bound() {
        // Sorted: 0.05 (row 2), 0.2 (row 0), 0.3 (row 3), 2.0 (row 1). Cumulative minus the
        // current: 0, 0.05, 0.25, 0.55 → rows 2, 0, 3 within 0.5.
        assert_eq!(accept_by_entropy(&[0.2, 2.0, 0.05, 0.3], 0.5), [true, false, true, true]);
        // The lowest row is always accepted, however high.
        assert_eq!(accept_by_entropy(&[5.0, 6.0], 0.1), [true, false]);
    }

    #[test]
    fn stopping_needs_a_stable_argmax_and_confidence() {
        let mut r = StoppingRule::new(&params());
        let low = [0.01; 4];
        // Two steps of history must repeat the argmax before a stop.
        assert!(!r.update(&[1, 2, 3, 4], &low));
        assert!(!r.update(&[1, 2, 3, 4], &low));
        assert!(r.update(&[1, 2, 3, 4], &low));
        // A change resets stability; high entropy blocks a stop.
        assert!(!r.update(&[1, 2, 3, 5], &low));
        let mut r = StoppingRule::new(&DiffusionParams { stability_threshold: 0, ..params() });
        assert!(!r.update(&[1], &[0.2]));
        assert!(r.update(&[1], &[0.05]));
    }

    #[test]
    fn seeded_noise_is_reproducible_and_follows_probabilities() {
        let (mut a, mut b) = (SeededNoise::new(3), SeededNoise::new(3));
        assert_eq!(a.uniform_tokens(8, 100), b.uniform_tokens(8, 100));
        let probs = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        assert_eq!(a.categorical(&probs, 4), [1, 3]);
    }
}
