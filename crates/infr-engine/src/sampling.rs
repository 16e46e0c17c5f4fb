//! Turning logits into a token, with llama.cpp's default sampler chain order:
//! penalties → top-k → top-p → min-p → temperature → random draw (greedy when the
//! temperature is ≤ 0). See `src/llama-sampler.cpp` (`llama_sampler_*_apply`).

use std::collections::BTreeMap;

use infr_core::{LogitAdjust, MAX_LOGIT_ADJUST};

use crate::EngineError;

/// Sampling settings (the fields of OpenAI/llama.cpp requests).
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// ≤ 0 means greedy (argmax).
    pub temperature: f32,
    /// ≤ 0 disables.
    pub top_k: i32,
    /// ≥ 1 disables.
    pub top_p: f32,
    /// ≤ 0 disables.
    pub min_p: f32,
    /// 1 disables.
    pub repeat_penalty: f32,
    /// Tokens of history the penalties look at (0 disables, -1 = all).
    pub repeat_last_n: i32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// RNG seed; `None` picks one from the clock.
    pub seed: Option<u64>,
    /// Added to the logits of these token ids before anything else (OpenAI's `logit_bias`;
    /// `-inf` bans a token).
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
            logit_bias: Vec::new(),
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, ..Self::default() }
    }

    /// Reject values that make no sense (NaN, negative penalties…).
    pub fn validate(&self) -> Result<(), EngineError> {
        let bad = |m: &str| Err(EngineError::Invalid(m.to_owned()));
        if !self.temperature.is_finite() {
            return bad("temperature must be a finite number");
        }
        if self.logit_bias.iter().any(|&(_, b)| b.is_nan() || b == f32::INFINITY) {
            return bad("logit_bias values must be numbers (or -inf to ban a token)");
        }
        if !(self.top_p.is_finite() && self.top_p >= 0.0) {
            return bad("top_p must be between 0 and 1");
        }
        if !(self.min_p.is_finite() && self.min_p >= 0.0 && self.min_p <= 1.0) {
            return bad("min_p must be between 0 and 1");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad("repeat_penalty must be positive");
        }
        if !self.presence_penalty.is_finite() || !self.frequency_penalty.is_finite() {
            return bad("penalties must be finite numbers");
        }
        Ok(())
    }
}

/// A seed from the clock, for draws that were given none.
pub(crate) fn clock_seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// xoshiro256** seeded through splitmix64: small, fast, reproducible for a given seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng([u64; 4]);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        Self([next(), next(), next(), next()])
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let r = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A stateful sampler (the RNG advances with every draw).
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
}

/// What a sampler draws from: a whole logits row, or its best candidates
/// ([`Sampler::candidates_needed`] of them, from `Runner::step_top_k`).
pub(crate) enum Scores {
    Full(Vec<f32>),
    Top(Vec<(u32, f32)>),
}

impl Scores {
    /// The candidates of a step's output row; an error when the backend returned none.
    pub(crate) fn top(row: Option<Vec<(u32, f32)>>) -> Result<Self, EngineError> {
        match row {
            Some(c) if !c.is_empty() => Ok(Self::Top(c)),
            _ => Err(EngineError::Invalid("the backend returned no sampling candidates".into())),
        }
    }
}

/// Index of the largest value (first on ties, as llama.cpp's greedy sampler).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    /// A sampler; the seed comes from the params or the clock.
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(clock_seed);
        Self { rng: Rng::new(seed), params }
    }

    /// The settings.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// What a step must select for this sampler, given the sequence so far: `(k, adjust)`
    /// when the `k` largest logits of the row after `adjust` (its logit bias and penalties,
    /// [`Sampler::adjustments`]) are all it needs -- 1 when greedy, `top_k` for top-k
    /// sampling; `None` when an unbounded candidate set or more than
    /// [`MAX_LOGIT_ADJUST`] adjusted tokens need the whole row.
    pub fn selection(&self, history: &[u32]) -> Option<(usize, Vec<LogitAdjust>)> {
        let p = &self.params;
        let k = if p.temperature <= 0.0 {
            1
        } else if p.top_k > 0 {
            p.top_k as usize
        } else {
            return None;
        };
        let adjust = self.adjustments(history);
        (adjust.len() <= MAX_LOGIT_ADJUST).then_some((k, adjust))
    }

    /// The changes this sampler makes to a row's logits before choosing, given the sequence
    /// so far: each biased token's bias (OpenAI's `logit_bias`, applied first), then the
    /// repetition (multiplicative), frequency and presence penalties of the tokens in the
    /// last `repeat_last_n` of `history`; one entry per token, in token order.
    pub fn adjustments(&self, history: &[u32]) -> Vec<LogitAdjust> {
        let p = &self.params;
        let mut by_token: BTreeMap<u32, LogitAdjust> = BTreeMap::new();
        let unchanged = |token| LogitAdjust { token, bias: 0.0, repeat: 1.0, sub: 0.0 };
        for &(id, bias) in &p.logit_bias {
            by_token.entry(id).or_insert_with(|| unchanged(id)).bias += bias;
        }
        let none = p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0;
        if !none && p.repeat_last_n != 0 && !history.is_empty() {
            let n = if p.repeat_last_n < 0 { history.len() } else { (p.repeat_last_n as usize).min(history.len()) };
            let mut counts: BTreeMap<u32, u32> = BTreeMap::new();
            for &t in &history[history.len() - n..] {
                *counts.entry(t).or_default() += 1;
            }
            for (t, c) in counts {
                let a = by_token.entry(t).or_insert_with(|| unchanged(t));
                a.repeat = p.repeat_penalty;
                a.sub = c as f32 * p.frequency_penalty + p.presence_penalty;
            }
        }
        by_token.into_values().collect()
    }

    /// [`Sampler::sample`] from a row's largest logits after [`Sampler::adjustments`], best
    /// first as [`infr_core::top_k`] orders them (at least the `k` of
    /// [`Sampler::selection`]): the same draw as from the whole row (NaN logits aside: they
    /// rank last here and first in `sample`).
    pub fn sample_top(&mut self, top: &[(u32, f32)]) -> u32 {
        if self.params.temperature <= 0.0 {
            return top.first().map_or(0, |c| c.0);
        }
        let k = (self.params.top_k.max(1) as usize).min(top.len());
        self.sample_sorted(top[..k].to_vec())
    }

    /// Pick the next token from `logits` given the sequence so far (`history`, for penalties).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let mut logits = logits.to_vec();
        infr_core::adjust_rows(&mut logits, 1, &[self.adjustments(history)]);
        let p = &self.params;
        if p.temperature <= 0.0 {
            return argmax(&logits);
        }
        // Candidates sorted by logit, descending.
        let mut cand: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, l)).collect();
        let k = if p.top_k > 0 { (p.top_k as usize).min(cand.len()) } else { cand.len() };
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(k);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1));
        self.sample_sorted(cand)
    }

    /// top-p → min-p → temperature → draw over candidates sorted best first.
    fn sample_sorted(&mut self, mut cand: Vec<(u32, f32)>) -> u32 {
        let p = &self.params;
        if p.top_p < 1.0 {
            let probs = softmax(&cand);
            let mut cum = 0.0;
            let mut keep = cand.len();
            for (i, pr) in probs.iter().enumerate() {
                cum += pr;
                if cum >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if p.min_p > 0.0 {
            let threshold = cand[0].1 + p.min_p.ln();
            let keep = cand.iter().take_while(|c| c.1 >= threshold).count();
            cand.truncate(keep.max(1));
        }
        for c in cand.iter_mut() {
            c.1 /= p.temperature;
        }
        let probs = softmax(&cand);
        let r = self.rng.uniform();
        let mut cum = 0.0;
        for (c, pr) in cand.iter().zip(&probs) {
            cum += pr;
            if r < cum {
                return c.0;
            }
        }
        cand.last().map_or(0, |c| c.0)
    }
}

fn softmax(c: &[(u32, f32)]) -> Vec<f64> {
    let max = c.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f64> = c.iter().map(|x| ((x.1 - max) as f64).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drawing from the `k` best logits after the sampler's adjustments (what a device
    /// selection returns) is the same draw as from the whole row, with and without logit
    /// bias and penalties.
    #[test]
    fn sampling_from_the_top_candidates_equals_sampling_from_the_row() {
        // Distinct values: among equal logits the two paths may order candidates differently.
        let row: Vec<f32> = (0..500).map(|i| (i as f32 * 0.7359).sin() * 4.0 + i as f32 * 1e-4).collect();
        let history: Vec<u32> = (0..90).map(|i| (i * 37 % 500) as u32).chain([argmax(&row); 3]).collect();
        let penalties = SamplingParams {
            repeat_penalty: 1.3,
            frequency_penalty: 0.4,
            presence_penalty: -0.2,
            logit_bias: vec![(7, 5.0), (argmax(&row), -1.0), (11, f32::NEG_INFINITY), (7, 0.5)],
            ..Default::default()
        };
        for params in [
            SamplingParams::greedy(),
            SamplingParams { seed: Some(7), ..Default::default() },
            SamplingParams { temperature: 1.3, top_k: 5, top_p: 1.0, min_p: 0.0, seed: Some(9), ..Default::default() },
            SamplingParams { temperature: 0.0, ..penalties.clone() },
            SamplingParams { seed: Some(3), ..penalties.clone() },
            SamplingParams { repeat_last_n: -1, seed: Some(4), top_p: 0.8, ..penalties.clone() },
        ] {
            let (k, adjust) = Sampler::new(params.clone()).selection(&history).expect("a bounded selection");
            let mut adjusted = row.clone();
            infr_core::adjust_rows(&mut adjusted, 1, &[adjust]);
            let top = infr_core::top_k(&adjusted, k);
            let (mut a, mut b) = (Sampler::new(params.clone()), Sampler::new(params));
            for _ in 0..50 {
                assert_eq!(a.sample(&row, &history), b.sample_top(&top));
            }
        }
        let unbounded = SamplingParams { top_k: 0, ..Default::default() };
        assert_eq!(Sampler::new(unbounded).selection(&history), None);
        let everything = SamplingParams { repeat_last_n: -1, repeat_penalty: 1.1, ..Default::default() };
        let long: Vec<u32> = (0..2000).collect();
        assert_eq!(Sampler::new(everything).selection(&long), None, "more adjusted tokens than a device takes");
    }

    /// One adjustment per token: biases of one token add up, penalties count the window.
    #[test]
    fn adjustments_merge_bias_and_penalties_per_token() {
        let p = SamplingParams {
            repeat_penalty: 2.0,
            repeat_last_n: 3,
            frequency_penalty: 0.5,
            logit_bias: vec![(9, 1.0), (4, -2.0), (9, 0.5)],
            ..Default::default()
        };
        let got = Sampler::new(p).adjustments(&[1, 4, 4, 9, 4]);
        let want = vec![
            LogitAdjust { token: 4, bias: -2.0, repeat: 2.0, sub: 1.0 },
            LogitAdjust { token: 9, bias: 1.5, repeat: 2.0, sub: 0.5 },
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplingParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, 2.0], &[]), 1);
    }

    #[test]
    fn seeded_is_reproducible_and_respects_top_k() {
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32).collect();
        let p =
            SamplingParams { temperature: 1.0, top_k: 3, top_p: 1.0, min_p: 0.0, seed: Some(42), ..Default::default() };
        let a: Vec<u32> = {
            let mut s = Sampler::new(p.clone());
            (0..50).map(|_| s.sample(&logits, &[])).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(p);
            (0..50).map(|_| s.sample(&logits, &[])).collect()
        };
        assert_eq!(a, b);
        // The three best logits (value 6) are ids 6, 13, 20, ... top-k keeps three of them.
        assert!(a.iter().all(|&t| logits[t as usize] == 6.0));
    }

    #[test]
    fn repeat_penalty_changes_choice() {
        let p = SamplingParams { temperature: 0.0, repeat_penalty: 2.0, ..Default::default() };
        let mut s = Sampler::new(p);
        assert_eq!(s.sample(&[1.0, 0.8], &[0]), 1);
    }

    #[test]
    fn min_p_keeps_only_likely() {
        let p =
            SamplingParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.5, seed: Some(1), ..Default::default() };
        let mut s = Sampler::new(p);
        for _ in 0..100 {
            assert_eq!(s.sample(&[10.0, 0.0, 0.0], &[]), 0);
        }
    }
}
