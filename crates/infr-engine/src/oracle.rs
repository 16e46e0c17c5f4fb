//! Comparing our logits with llama.cpp's reference files (`testdata/oracle/logits/*.json`),
//! using the rules of `testdata/oracle/README.md` (a port of its `compare_oracle.py`).

use std::collections::HashMap;

use serde::Deserialize;

/// One row of a reference file: log-sum-exp and the 40 largest `(id, logit)` pairs.
#[derive(Debug, Clone, Deserialize)]
pub struct OracleRow {
    pub pos: usize,
    pub lse: f64,
    pub top: Vec<(u32, f64)>,
}

/// A reference file.
#[derive(Debug, Clone, Deserialize)]
pub struct Oracle {
    pub model: String,
    /// Case name (`short`, `chat`…); empty in the synthetic-model files.
    #[serde(default)]
    pub case: String,
    /// Vocabulary size; 0 when the file does not say (synthetic-model files).
    #[serde(default)]
    pub n_vocab: usize,
    pub prompt_ids: Vec<u32>,
    pub greedy_ids: Vec<u32>,
    pub rows: Vec<OracleRow>,
}

impl Oracle {
    /// Parse a reference file.
    pub fn from_json(s: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(s)
    }
}

/// The comparison results (field names as `compare_oracle.py` prints them).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub rows_compared: usize,
    pub greedy_required: usize,
    pub greedy_matched: usize,
    pub greedy_ok: bool,
    pub top1_agree: f64,
    pub top1_agree_clear_rows: f64,
    pub top10_overlap_mean: f64,
    pub top10_overlap_min: f64,
    pub kl_top40_mean: f64,
    pub kl_top40_max: f64,
    /// Rows whose KL exceeds the per-row limit (0.1), for diagnosis.
    pub bad_rows: Vec<(usize, f64)>,
}

impl Report {
    /// The pass thresholds of the oracle README: greedy prefix, 100% top-1 on clear rows,
    /// top-1 agreement ≥ 0.85, top-10 overlap mean ≥ 0.9 and min ≥ 0.5, KL mean ≤ 0.01 and
    /// max ≤ 0.1. Returns the failed conditions.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        if !self.greedy_ok {
            f.push(format!("greedy: matched {} < required {}", self.greedy_matched, self.greedy_required));
        }
        if self.top1_agree_clear_rows < 1.0 {
            f.push(format!("top-1 on clear rows {:.3} < 1", self.top1_agree_clear_rows));
        }
        if self.top1_agree < 0.85 {
            f.push(format!("top-1 agreement {:.3} < 0.85", self.top1_agree));
        }
        if self.top10_overlap_mean < 0.9 || self.top10_overlap_min < 0.5 {
            f.push(format!("top-10 overlap mean {:.3} min {:.2}", self.top10_overlap_mean, self.top10_overlap_min));
        }
        if self.kl_top40_mean > 0.01 || self.kl_top40_max > 0.1 {
            f.push(format!("KL mean {:.5} max {:.4}", self.kl_top40_mean, self.kl_top40_max));
        }
        f
    }
}

/// Our side of a row: full logits.
struct TestRow<'a> {
    logits: &'a [f32],
    lse: f64,
    order: Vec<u32>,
}

fn test_row(logits: &[f32]) -> TestRow<'_> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + logits.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let k = 40.min(idx.len());
    idx.select_nth_unstable_by(k - 1, |&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]).then(a.cmp(&b)));
    TestRow { logits, lse, order: idx }
}

const REST_FLOOR: f64 = 1e-3;

fn log_softmax(v: &[f64]) -> Vec<f64> {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let s = v.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    v.iter().map(|x| x - m - s).collect()
}

/// Approximate KL(P_ref || P_test) over the reference's top-40 plus one pooled "rest" bucket.
fn approx_kl(r: &OracleRow, t: &TestRow<'_>) -> f64 {
    let lp: Vec<f64> = r.top.iter().map(|&(_, l)| l).collect();
    let lq: Vec<f64> = r.top.iter().map(|&(id, _)| t.logits[id as usize] as f64).collect();
    let s_p: f64 = lp.iter().map(|l| (l - r.lse).exp()).sum();
    let s_q: f64 = lq.iter().map(|l| (l - t.lse).exp()).sum();
    let (cp, cq) = (log_softmax(&lp), log_softmax(&lq));
    let kl_cond: f64 = cp.iter().zip(&cq).map(|(p, q)| p.exp() * (p - q)).sum();
    let r_p = (1.0 - s_p).clamp(REST_FLOOR, 1.0);
    let r_q = (1.0 - s_q).clamp(REST_FLOOR, 1.0);
    let (sp, sq) = (1.0 - r_p, 1.0 - r_q);
    let mut kl_bin = r_p * (r_p / r_q).ln();
    if sp > 0.0 {
        kl_bin += sp * (sp / sq.max(1e-30)).ln();
    }
    (sp * kl_cond + kl_bin).max(0.0)
}

/// Compare our logits (`rows[i]` = logits after token i of `prompt_ids + our_greedy`) with
/// the reference. `margin` is the clear-decision threshold (0.5 in the README).
pub fn compare(oracle: &Oracle, rows: &[Vec<f32>], our_greedy: &[u32], margin: f64) -> Report {
    let n_prompt = oracle.prompt_ids.len();
    let margin_of = |i: usize| oracle.rows[i].top[0].1 - oracle.rows[i].top[1].1;
    let mut n_req = 0;
    for k in 0..oracle.greedy_ids.len() {
        if margin_of(n_prompt - 1 + k) <= margin {
            break;
        }
        n_req += 1;
    }
    let n_match = oracle.greedy_ids.iter().zip(our_greedy).take_while(|(a, b)| a == b).count();
    let n_rows = (n_prompt + n_match).min(oracle.rows.len()).min(rows.len());
    let (mut top1, mut top1_clear, mut n_clear) = (0usize, 0usize, 0usize);
    let mut ov = Vec::with_capacity(n_rows);
    let mut kls = Vec::with_capacity(n_rows);
    for i in 0..n_rows {
        let r = &oracle.rows[i];
        let t = test_row(&rows[i]);
        let same = r.top[0].0 == t.order[0];
        top1 += same as usize;
        if margin_of(i) > margin {
            n_clear += 1;
            top1_clear += same as usize;
        }
        let ref10: HashMap<u32, ()> = r.top.iter().take(10).map(|&(id, _)| (id, ())).collect();
        ov.push(t.order.iter().take(10).filter(|id| ref10.contains_key(id)).count() as f64 / 10.0);
        kls.push(approx_kl(r, &t));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    Report {
        rows_compared: n_rows,
        greedy_required: n_req,
        greedy_matched: n_match,
        greedy_ok: n_match >= n_req,
        top1_agree: top1 as f64 / n_rows.max(1) as f64,
        top1_agree_clear_rows: if n_clear > 0 { top1_clear as f64 / n_clear as f64 } else { 1.0 },
        top10_overlap_mean: mean(&ov),
        top10_overlap_min: ov.iter().copied().fold(f64::INFINITY, f64::min),
        kl_top40_mean: mean(&kls),
        kl_top40_max: kls.iter().copied().fold(0.0, f64::max),
        bad_rows: kls.iter().enumerate().filter(|(_, &k)| k > 0.1).map(|(i, &k)| (i, k)).collect(),
    }
}
