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

/// The gated delta rule, one token at a time per value head; state `S[h][j][i]` with `i`
/// (key index) contiguous, as ggml stores it.
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
        // Heads are independent: one task per value head, each walking the tokens.
        let mut head_out: Vec<Vec<f32>> = vec![Vec::new(); hv];
        s_all.par_chunks_mut(n * n).zip(head_out.par_iter_mut()).enumerate().for_each(|(h, (s, ho))| {
            let kh = h % hk;
            ho.resize((end - start) * n, 0.0);
            let mut sk = vec![0f32; n];
            for (t, o) in (start..end).zip(ho.chunks_mut(n)) {
                let q = &d.q[(t * hk + kh) * n..][..n];
                let k = &d.k[(t * hk + kh) * n..][..n];
                let v = &d.v[(t * hv + h) * n..][..n];
                let g = (softplus(d.alpha[t * hv + h]) * d.decay[h]).exp();
                let b = 1.0 / (1.0 + (-d.beta[t * hv + h]).exp());
                // S = g S; sk = S^T k (row j of S is value index j).
                for (j, row) in s.chunks_mut(n).enumerate() {
                    let mut acc = 0f32;
                    for (sv, kv) in row.iter_mut().zip(k) {
                        *sv *= g;
                        acc += *sv * kv;
                    }
                    sk[j] = acc;
                }
                // S += k (b (v - sk))^T; o = S^T (q * scale).
                for (j, row) in s.chunks_mut(n).enumerate() {
                    let dj = (v[j] - sk[j]) * b;
                    let mut acc = 0f32;
                    for ((sv, kv), qv) in row.iter_mut().zip(k).zip(q) {
                        *sv += kv * dj;
                        acc += *sv * qv;
                    }
                    o[j] = acc * p.scale;
                }
            }
        });
        for (h, ho) in head_out.iter().enumerate() {
            for (t, o) in (start..end).zip(ho.chunks(n)) {
                out[(t * hv + h) * n..][..n].copy_from_slice(o);
            }
        }
    }
    Ok(out)
}
