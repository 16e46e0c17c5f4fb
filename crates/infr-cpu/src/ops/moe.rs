//! Mixture-of-experts FFN, as llama.cpp's `build_moe_ffn` computes it: route each token to
//! its top-k experts, run every chosen expert's gated FFN over the tokens routed to it
//! (`ggml_mul_mat_id`: an expert with no tokens costs nothing), weight and sum the results in
//! routing order, then add the shared expert. An op over a slice of the experts
//! (`MoeParams::expert_slice`) computes the chosen experts it holds.

use std::collections::HashMap;

use infr_core::{BackendError, ExpertGateUp, MoeGating, MoeParams, WeightId};

use crate::backend::CpuWeight;
use crate::matmul::{self, KernelTier};
use crate::ops::elementwise;

/// The routing of `n` tokens: for token `t`, slot `s < k`, expert `ids[t*k+s]` with weight
/// `weights[t*k+s]`, slots in descending order of the selection score.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub k: usize,
    pub ids: Vec<u32>,
    pub weights: Vec<f32>,
}

/// Smallest divisor when renormalising the chosen weights (llama.cpp clamps the sum to the
/// smallest normal f16, 2^-14).
const MIN_WEIGHT_SUM: f32 = 6.103_515_6e-5;

/// Route `n` rows of router logits (`n_expert` each): selection by the gated score (softmax and
/// sigmoid are monotonic, so the logits' order), ties to the lower expert id; then the weights
/// of the chosen experts as `p.gating` defines them, renormalised and scaled per expert.
pub fn route(logits: &[f32], p: &MoeParams, expert_scale: Option<&[f32]>) -> Routing {
    let (ne, k) = (p.n_expert as usize, p.n_used as usize);
    let n = logits.len() / ne;
    let mut ids = Vec::with_capacity(n * k);
    let mut weights = Vec::with_capacity(n * k);
    let mut order: Vec<u32> = Vec::with_capacity(ne);
    for row in logits.chunks_exact(ne) {
        order.clear();
        order.extend(0..ne as u32);
        order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
        let chosen = &order[..k];
        let mut w: Vec<f32> = match p.gating {
            MoeGating::Softmax => {
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let sum: f32 = row.iter().map(|&l| (l - max).exp()).sum();
                chosen.iter().map(|&e| (row[e as usize] - max).exp() / sum).collect()
            }
            MoeGating::Sigmoid => chosen.iter().map(|&e| 1.0 / (1.0 + (-row[e as usize]).exp())).collect(),
            MoeGating::SoftmaxChosen => {
                let max = row[chosen[0] as usize];
                let e: Vec<f32> = chosen.iter().map(|&e| (row[e as usize] - max).exp()).collect();
                let sum: f32 = e.iter().sum();
                e.iter().map(|v| v / sum).collect()
            }
        };
        if p.renorm {
            let sum = w.iter().sum::<f32>().max(MIN_WEIGHT_SUM);
            w.iter_mut().for_each(|v| *v /= sum);
        }
        if let Some(s) = expert_scale {
            w.iter_mut().zip(chosen).for_each(|(v, &e)| *v *= s[e as usize]);
        }
        ids.extend_from_slice(chosen);
        weights.extend_from_slice(&w);
    }
    Routing { k, ids, weights }
}

/// `x[n, k] · Wᵀ` for one (expert) weight, activations rounded for its type.
fn matmul(tier: KernelTier, x: &[f32], n: usize, w: &CpuWeight) -> Vec<f32> {
    let acts = matmul::prepare_acts(x, w.cols, w.ty, !matmul::uses_fast(tier, w.ty));
    let mut out = vec![0f32; n * w.rows];
    matmul::linear(tier, &acts, n, w, None, &mut out);
    out
}

/// Row `e` of a 2-D per-expert bias, as f32.
fn bias_row(w: &CpuWeight, e: usize) -> Result<Vec<f32>, BackendError> {
    let mut v = vec![0f32; w.cols];
    let bytes = w
        .bytes
        .get(e * w.row_bytes..(e + 1) * w.row_bytes)
        .ok_or_else(|| BackendError::InvalidInput(format!("expert bias has no row {e}")))?;
    infr_quant::dequantize(w.ty, bytes, &mut v).map_err(|e| BackendError::InvalidInput(e.to_string()))?;
    Ok(v)
}

/// `rows += bias` for every row.
fn add_rows(rows: &mut [f32], bias: &[f32]) {
    for r in rows.chunks_exact_mut(bias.len()) {
        r.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
    }
}

/// Expert `e` of a 3-D weight.
fn expert(w: &CpuWeight, e: usize) -> Result<&CpuWeight, BackendError> {
    w.experts.get(e).ok_or_else(|| BackendError::InvalidInput(format!("expert {e} of a weight without {}", e + 1)))
}

/// The op: `x` is `[n, cols]`, `logits` `[n, n_expert]`; returns `[n, out_cols]`.
pub(crate) fn moe(
    weights: &HashMap<WeightId, CpuWeight>,
    tier: KernelTier,
    x: &[f32],
    logits: &[f32],
    p: &MoeParams,
    out_cols: usize,
) -> Result<Vec<f32>, BackendError> {
    let w =
        |id: &WeightId| weights.get(id).ok_or_else(|| BackendError::InvalidInput(format!("weight {} missing", id.0)));
    let ne = p.n_expert as usize;
    let n = logits.len() / ne;
    let cols = x.len() / n.max(1);
    let ff = p.n_ff as usize;
    let scale = match &p.expert_scale {
        Some(s) => w(s)?.f32.as_deref(),
        None => None,
    };
    let r = route(logits, p, scale);
    let k = r.k;
    // Token slots per held expert (local index), in token order (ggml_mul_mat_id's
    // grouping); pairs routed to experts outside the op's slice contribute nothing.
    let (first, count) = p.held_experts();
    let mut by_expert: Vec<Vec<usize>> = vec![Vec::new(); count as usize];
    for (slot, &e) in r.ids.iter().enumerate() {
        if let Some(local) = e.checked_sub(first).filter(|&l| l < count) {
            by_expert[local as usize].push(slot);
        }
    }
    let down = w(&p.down)?;
    let mut ys = vec![0f32; n * k * out_cols];
    for (e, slots) in by_expert.iter().enumerate() {
        if slots.is_empty() {
            continue;
        }
        let cnt = slots.len();
        let mut a = Vec::with_capacity(cnt * cols);
        for &s in slots {
            let row = &x[(s / k) * cols..(s / k + 1) * cols];
            if p.weight_before {
                a.extend(row.iter().map(|v| v * r.weights[s]));
            } else {
                a.extend_from_slice(row);
            }
        }
        let (mut g, u) = match p.gate_up {
            ExpertGateUp::Separate { gate, up } => {
                let mut g = matmul(tier, &a, cnt, expert(w(&gate)?, e)?);
                let mut u = matmul(tier, &a, cnt, expert(w(&up)?, e)?);
                if let Some(ExpertGateUp::Separate { gate: gb, up: ub }) = p.gate_up_bias {
                    add_rows(&mut g, &bias_row(w(&gb)?, e)?);
                    add_rows(&mut u, &bias_row(w(&ub)?, e)?);
                }
                (g, u)
            }
            ExpertGateUp::Fused(gu) => {
                let mut both = matmul(tier, &a, cnt, expert(w(&gu)?, e)?);
                if let Some(ExpertGateUp::Fused(b)) = p.gate_up_bias {
                    add_rows(&mut both, &bias_row(w(&b)?, e)?);
                }
                let mut g = Vec::with_capacity(cnt * ff);
                let mut u = Vec::with_capacity(cnt * ff);
                for row in both.chunks_exact(2 * ff) {
                    g.extend_from_slice(&row[..ff]);
                    u.extend_from_slice(&row[ff..]);
                }
                (g, u)
            }
        };
        elementwise::glu(&mut g, &u, p.act);
        let mut y = matmul(tier, &g, cnt, expert(down, e)?);
        if let Some(b) = &p.down_bias {
            add_rows(&mut y, &bias_row(w(b)?, e)?);
        }
        for (i, &s) in slots.iter().enumerate() {
            ys[s * out_cols..(s + 1) * out_cols].copy_from_slice(&y[i * out_cols..(i + 1) * out_cols]);
        }
    }
    let mut out = vec![0f32; n * out_cols];
    for (t, o) in out.chunks_exact_mut(out_cols).enumerate() {
        for s in 0..k {
            let slot = t * k + s;
            let wt = if p.weight_before { 1.0 } else { r.weights[slot] };
            let y = &ys[slot * out_cols..(slot + 1) * out_cols];
            if s == 0 {
                o.iter_mut().zip(y).for_each(|(o, y)| *o = y * wt);
            } else {
                o.iter_mut().zip(y).for_each(|(o, y)| *o += y * wt);
            }
        }
    }
    if let Some(sh) = &p.shared {
        let mut g = matmul(tier, x, n, w(&sh.gate)?);
        let u = matmul(tier, x, n, w(&sh.up)?);
        elementwise::glu(&mut g, &u, p.act);
        let mut y = matmul(tier, &g, n, w(&sh.down)?);
        if let Some(gi) = &sh.gate_inp {
            let gv = w(gi)?
                .f32
                .as_deref()
                .ok_or_else(|| BackendError::InvalidInput("shared gate is not a vector".into()))?;
            for (row, yr) in x.chunks_exact(cols).zip(y.chunks_exact_mut(out_cols)) {
                let d = matmul::dot_f32(row, gv);
                let gate = 1.0 / (1.0 + (-d).exp());
                yr.iter_mut().for_each(|v| *v *= gate);
            }
        }
        out.iter_mut().zip(&y).for_each(|(o, y)| *o += y);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use infr_core::{Activation, WeightId};

    fn params(gating: MoeGating, renorm: bool) -> MoeParams {
        MoeParams {
            n_expert: 4,
            n_used: 2,
            n_ff: 1,
            gating,
            renorm,
            weight_before: false,
            gate_up: ExpertGateUp::Fused(WeightId(0)),
            down: WeightId(1),
            act: Activation::Silu,
            expert_scale: None,
            shared: None,
            gate_up_bias: None,
            down_bias: None,
            expert_slice: None,
        }
    }

    #[test]
    fn routing_follows_each_gating() {
        let logits = [0.5f32, 2.0, -1.0, 1.0];
        let r = route(&logits, &params(MoeGating::Softmax, false), None);
        assert_eq!(r.ids, vec![1, 3]);
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((r.weights[0] - 2f32.exp() / z).abs() < 1e-6 && (r.weights[1] - 1f32.exp() / z).abs() < 1e-6);
        let r = route(&logits, &params(MoeGating::Softmax, true), Some(&[1.0, 2.0, 1.0, 3.0]));
        let (a, b) = (2f32.exp(), 1f32.exp());
        assert!((r.weights[0] - 2.0 * a / (a + b)).abs() < 1e-6 && (r.weights[1] - 3.0 * b / (a + b)).abs() < 1e-6);
        let r = route(&logits, &params(MoeGating::Sigmoid, false), None);
        assert!((r.weights[0] - 1.0 / (1.0 + (-2f32).exp())).abs() < 1e-6);
        let r = route(&logits, &params(MoeGating::SoftmaxChosen, false), None);
        assert!((r.weights[0] + r.weights[1] - 1.0).abs() < 1e-6 && r.weights[0] > r.weights[1]);
        // Ties go to the lower expert id.
        let r = route(&[1.0, 1.0, 1.0, 1.0], &params(MoeGating::Softmax, true), None);
        assert_eq!(r.ids, vec![0, 1]);
    }
}
