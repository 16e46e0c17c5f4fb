//! Recurrent ops with per-sequence state: the causal depthwise convolution
//! (`ggml_ssm_conv`) and the gated delta rule (llama.cpp `build_delta_net_autoregressive`).
//!
//! Both walk each sequence's rows in order (the step guarantees they are contiguous and
//! consecutive); a sequence whose first row is position 0 starts from a zero state.

use infr_core::{BackendError, Conv1dParams, DeltaNetParams, StepInputs};
use rayon::prelude::*;

use crate::state::StateCache;

/// Row ranges `[start, end)` of each sequence in the step, with its index in `inp.seqs`.
fn runs(inp: &StepInputs<'_>) -> Vec<(usize, usize, usize)> {
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    for (t, &s) in inp.token_seq.iter().enumerate() {
        match out.last_mut() {
            Some(r) if r.2 == s as usize => r.1 = t + 1,
            _ => out.push((t, t + 1, s as usize)),
        }
    }
    out
}

/// Causal depthwise convolution of `x` (`[rows, channels]`) with `w` (`channels` rows of
/// `kernel` taps), reading and updating each sequence's window.
pub(crate) fn conv1d(
    state: &mut StateCache,
    x: &[f32],
    w: &[f32],
    channels: usize,
    p: &Conv1dParams,
    inp: &StepInputs<'_>,
) -> Result<Vec<f32>, BackendError> {
    let k = p.kernel as usize;
    let hist = k - 1;
    let mut out = vec![0f32; x.len()];
    for (start, end, si) in runs(inp) {
        let slot = inp.seqs[si].state_slot;
        let win = state.slot_mut(p.state, slot)?;
        if inp.positions[start] == 0 {
            win.iter_mut().for_each(|v| *v = 0.0);
        }
        // The sequence's inputs: the saved window, then the step's rows.
        let n = end - start;
        let mut seq_in = Vec::with_capacity((hist + n) * channels);
        seq_in.extend_from_slice(win);
        seq_in.extend_from_slice(&x[start * channels..end * channels]);
        out[start * channels..end * channels].par_chunks_mut(channels).enumerate().for_each(|(t, o)| {
            for (c, o) in o.iter_mut().enumerate() {
                let mut acc = 0f32;
                for j in 0..k {
                    acc += seq_in[(t + j) * channels + c] * w[c * k + j];
                }
                *o = if p.silu { acc / (1.0 + (-acc).exp()) } else { acc };
            }
        });
        win.copy_from_slice(&seq_in[n * channels..]);
    }
    Ok(out)
}

/// The inputs of [`delta_net`], each `[rows, width]` row-major.
pub(crate) struct DeltaNetInputs<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub alpha: &'a [f32],
    pub beta: &'a [f32],
    /// `ssm_a` per value head.
    pub decay: &'a [f32],
}

/// `ggml_compute_softplus_f32`.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}

/// Runs at least this long take the chunked form of the delta rule (`HeadRun::chunked`;
/// llama.cpp chunks every multi-token step, `build_delta_net_chunking`): never by default
/// (`INFR_CPU_DELTA_CHUNK_MIN=N` sets it, 0 = never). On the CPU the chunked form does more
/// work than the recurrence for no gain in parallelism (the heads already run in parallel):
/// 34.3 against 26.9 us per token and head (head dim 128, runs of 64 and 512 tokens, one core
/// of this machine). It is the reference of the GPU's chunked kernels.
fn chunked_min_tokens() -> usize {
    static MIN: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MIN.get_or_init(|| std::env::var("INFR_CPU_DELTA_CHUNK_MIN").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0))
}

/// Tokens per chunk of the chunked form (llama.cpp's and the published kernels' size).
pub(crate) const DELTA_CHUNK: usize = 64;

/// The gated delta rule per value head; state `S[h][j][i]` with `i` (key index) contiguous,
/// as ggml stores it. Runs take the recurrence, or the chunked form from
/// [`chunked_min_tokens`] tokens on; both give the same state and outputs (up to rounding).
pub(crate) fn delta_net(
    state: &mut StateCache,
    d: &DeltaNetInputs<'_>,
    p: &DeltaNetParams,
    inp: &StepInputs<'_>,
) -> Result<Vec<f32>, BackendError> {
    let (hk, hv, n) = (p.n_k_head as usize, p.n_v_head as usize, p.head_dim as usize);
    let rows = inp.tokens.len();
    let mut out = vec![0f32; rows * hv * n];
    for (start, end, si) in runs(inp) {
        let slot = inp.seqs[si].state_slot;
        let s_all = state.slot_mut(p.state, slot)?;
        if inp.positions[start] == 0 {
            s_all.iter_mut().for_each(|v| *v = 0.0);
        }
        let t = end - start;
        // Heads are independent: one task per value head, its run's rows gathered.
        let mut head_out: Vec<Vec<f32>> = vec![Vec::new(); hv];
        s_all.par_chunks_mut(n * n).zip(head_out.par_iter_mut()).enumerate().for_each(|(h, (s, ho))| {
            let kh = h % hk;
            let rows_of = |x: &[f32], heads: usize, hh: usize| -> Vec<f32> {
                (start..end).flat_map(|r| x[(r * heads + hh) * n..][..n].iter().copied()).collect()
            };
            let run = HeadRun {
                n,
                q: &rows_of(d.q, hk, kh),
                k: &rows_of(d.k, hk, kh),
                v: &rows_of(d.v, hv, h),
                log_decay: &(start..end).map(|r| softplus(d.alpha[r * hv + h]) * d.decay[h]).collect::<Vec<_>>(),
                beta: &(start..end).map(|r| 1.0 / (1.0 + (-d.beta[r * hv + h]).exp())).collect::<Vec<_>>(),
                scale: p.scale,
            };
            ho.resize(t * n, 0.0);
            let chunk_min = chunked_min_tokens();
            if chunk_min > 0 && t >= chunk_min {
                run.chunked(s, DELTA_CHUNK, ho);
            } else {
                run.recurrent(s, ho);
            }
        });
        for (h, ho) in head_out.iter().enumerate() {
            for (r, o) in (start..end).zip(ho.chunks(n)) {
                out[(r * hv + h) * n..][..n].copy_from_slice(o);
            }
        }
    }
    Ok(out)
}

/// One value head's run of `T` tokens: `q`, `k`, `v` as `T x n` rows (q and k L2-normalised
/// by the graph), the log of each token's decay `g = exp(softplus(alpha) * ssm_a)` and its
/// `b = sigmoid(beta)`.
pub(crate) struct HeadRun<'a> {
    pub n: usize,
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub log_decay: &'a [f32],
    pub beta: &'a [f32],
    pub scale: f32,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl<'a> HeadRun<'a> {
    /// Token by token (llama.cpp `build_delta_net_autoregressive`): `S = g S`,
    /// `d = b (v - S k)`, `S += d k^T`, `o = S q * scale`, with `S` (`n x n`, row `j` = value
    /// index `j`) updated in place and `o` (`T x n`) written.
    pub fn recurrent(&self, s: &mut [f32], o: &mut [f32]) {
        let n = self.n;
        let mut sk = vec![0f32; n];
        for (t, o) in o.chunks_mut(n).enumerate() {
            let (q, k, v) = (&self.q[t * n..][..n], &self.k[t * n..][..n], &self.v[t * n..][..n]);
            let (g, b) = (self.log_decay[t].exp(), self.beta[t]);
            for (j, row) in s.chunks_mut(n).enumerate() {
                let mut acc = 0f32;
                for (sv, kv) in row.iter_mut().zip(k) {
                    *sv *= g;
                    acc += *sv * kv;
                }
                sk[j] = acc;
            }
            for (j, row) in s.chunks_mut(n).enumerate() {
                let dj = (v[j] - sk[j]) * b;
                let mut acc = 0f32;
                for ((sv, kv), qv) in row.iter_mut().zip(k).zip(q) {
                    *sv += kv * dj;
                    acc += *sv * qv;
                }
                o[j] = acc * self.scale;
            }
        }
    }

    /// The same state and outputs, `chunk` tokens at a time (the chunkwise form of the gated
    /// delta rule, Yang et al. 2024, "Gated Delta Networks", and llama.cpp's
    /// `build_delta_net_chunking`). Within a chunk, with `G_t` the cumulative log decay and
    /// `S` the state before it, the state after token `t` is
    /// `e^{G_t} S + sum_{s<=t} e^{G_t - G_s} u_s k_s^T`, where the pseudo-values `u` solve the
    /// unit lower-triangular system
    /// `u_t + b_t sum_{s<t} e^{G_t - G_s} (k_s.k_t) u_s = b_t (v_t - e^{G_t} S k_t)`.
    /// So the outputs are `scale (e^{G_t} S q_t + sum_{s<=t} e^{G_t - G_s} (k_s.q_t) u_s)` and
    /// the chunk's products with `S` are independent across its tokens.
    pub fn chunked(&self, s: &mut [f32], chunk: usize, o: &mut [f32]) {
        let n = self.n;
        let tokens = self.log_decay.len();
        let chunk = chunk.max(1);
        let mut u = vec![0f32; chunk * n];
        let mut g = vec![0f32; chunk];
        for c0 in (0..tokens).step_by(chunk) {
            let c = chunk.min(tokens - c0);
            let row = |x: &'a [f32], t: usize| -> &'a [f32] { &x[(c0 + t) * n..][..n] };
            let mut acc = 0f32;
            for t in 0..c {
                acc += self.log_decay[c0 + t];
                g[t] = acc;
            }
            // u_t = b_t (v_t - e^{G_t} S k_t) - sum_{s<t} b_t e^{G_t - G_s} (k_s.k_t) u_s.
            for t in 0..c {
                let (k, v, b) = (row(self.k, t), row(self.v, t), self.beta[c0 + t]);
                let (done, rest) = u.split_at_mut(t * n);
                let ut = &mut rest[..n];
                let decay = g[t].exp();
                for (j, uj) in ut.iter_mut().enumerate() {
                    *uj = b * (v[j] - decay * dot(&s[j * n..][..n], k));
                }
                for (sidx, us) in done.chunks(n).enumerate() {
                    let a = b * (g[t] - g[sidx]).exp() * dot(row(self.k, sidx), k);
                    for (uj, usj) in ut.iter_mut().zip(us) {
                        *uj -= a * usj;
                    }
                }
            }
            // o_t = scale (e^{G_t} S q_t + sum_{s<=t} e^{G_t - G_s} (k_s.q_t) u_s).
            for t in 0..c {
                let q = row(self.q, t);
                let ot = &mut o[(c0 + t) * n..][..n];
                let decay = g[t].exp();
                for (j, oj) in ot.iter_mut().enumerate() {
                    *oj = decay * dot(&s[j * n..][..n], q);
                }
                for sidx in 0..=t {
                    let a = (g[t] - g[sidx]).exp() * dot(row(self.k, sidx), q);
                    for (oj, usj) in ot.iter_mut().zip(&u[sidx * n..][..n]) {
                        *oj += a * usj;
                    }
                }
                ot.iter_mut().for_each(|x| *x *= self.scale);
            }
            // S = e^{G_last} S + sum_s e^{G_last - G_s} u_s k_s^T.
            let last = g[c - 1];
            let w: Vec<f32> = (0..c).map(|t| (last - g[t]).exp()).collect();
            let decay = last.exp();
            for (j, srow) in s.chunks_mut(n).enumerate() {
                srow.iter_mut().for_each(|x| *x *= decay);
                for (t, wt) in w.iter().enumerate() {
                    let f = wt * u[t * n + j];
                    for (x, kv) in srow.iter_mut().zip(row(self.k, t)) {
                        *x += f * kv;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random rows in [-1, 1) from a small LCG, L2-normalised when `unit`.
    fn rows(seed: u64, t: usize, n: usize, unit: bool) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut v: Vec<f32> = (0..t * n)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        if unit {
            for r in v.chunks_mut(n) {
                let norm = dot(r, r).sqrt().max(1e-6);
                r.iter_mut().for_each(|x| *x /= norm);
            }
        }
        v
    }

    /// The chunked form gives the recurrence's outputs and final state for chunks of several
    /// sizes, runs shorter and longer than a chunk and not a multiple of it, from a zero and
    /// from a random state, with strong and weak decays.
    #[test]
    fn chunked_delta_rule_matches_the_recurrence() {
        let n = 32;
        for (case, &t) in [1usize, 5, 63, 64, 65, 130].iter().enumerate() {
            for strong in [false, true] {
                let seed = 10 * case as u64 + strong as u64;
                let (q, k, v) = (rows(seed, t, n, true), rows(seed + 100, t, n, true), rows(seed + 200, t, n, false));
                let log_decay: Vec<f32> =
                    rows(seed + 300, t, 1, false).iter().map(|x| -(x.abs() * if strong { 4.0 } else { 0.1 })).collect();
                let beta: Vec<f32> = rows(seed + 400, t, 1, false).iter().map(|x| 0.5 + 0.5 * x).collect();
                let run = HeadRun { n, q: &q, k: &k, v: &v, log_decay: &log_decay, beta: &beta, scale: 0.2 };
                let s0 = if case % 2 == 0 { vec![0f32; n * n] } else { rows(seed + 500, n, n, false) };
                let (mut s_ref, mut o_ref) = (s0.clone(), vec![0f32; t * n]);
                run.recurrent(&mut s_ref, &mut o_ref);
                for chunk in [1, 3, 16, 64] {
                    let (mut s, mut o) = (s0.clone(), vec![0f32; t * n]);
                    run.chunked(&mut s, chunk, &mut o);
                    let err = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
                    let what = format!("{t} tokens, chunk {chunk}, strong decay {strong}");
                    assert!(err(&o, &o_ref) < 1e-4, "{what}: outputs differ by {}", err(&o, &o_ref));
                    assert!(err(&s, &s_ref) < 1e-4, "{what}: states differ by {}", err(&s, &s_ref));
                }
            }
        }
    }
}
