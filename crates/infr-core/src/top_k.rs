//! The k largest entries of a logits row: what greedy and top-k sampling need, and what a
//! backend that samples on its device returns instead of whole rows.

use std::cmp::Ordering;

/// `(index, value)` pairs of the `k` largest values of `row`, best first: higher value
/// first, the lower index first among equal values, NaN below everything.
pub fn top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    // A sampler's k (tens) of a vocabulary row (tens of thousands): one pass keeping the best k
    // in order touches each value once, where selecting over the whole row first copies it.
    if k > 0 && k <= SMALL_K && k * 8 <= row.len() {
        return top_k_scan(row, k);
    }
    top_k_select(row, k)
}

/// Largest `k` that [`top_k`] answers with one ordered pass.
const SMALL_K: usize = 256;

/// NaN ranks below everything.
fn rank_key(v: f32) -> f32 {
    if v.is_nan() {
        f32::NEG_INFINITY
    } else {
        v
    }
}

/// [`top_k`] by one pass over `row` with the best `k` kept sorted: later indices come later, so
/// a value equal to the current k-th never displaces it (the lower index wins ties).
fn top_k_scan(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    for (i, &v) in row.iter().enumerate() {
        let kv = rank_key(v);
        if best.len() == k && kv <= rank_key(best[k - 1].1) {
            continue;
        }
        // First place whose value is below kv (equal values stay ahead: lower indices).
        let at = best.partition_point(|&(_, b)| rank_key(b) >= kv);
        best.insert(at, (i as u32, v));
        if best.len() > k {
            best.pop();
        }
    }
    best
}

/// [`top_k`] by selection over a copy of the row (any k).
fn top_k_select(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let key = rank_key;
    let order = |a: &(u32, f32), b: &(u32, f32)| match key(b.1).partial_cmp(&key(a.1)) {
        Some(Ordering::Equal) | None => a.0.cmp(&b.0),
        Some(o) => o,
    };
    let mut c: Vec<(u32, f32)> = row.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
    let k = k.min(c.len());
    if k == 0 {
        return Vec::new();
    }
    if k < c.len() {
        c.select_nth_unstable_by(k - 1, order);
        c.truncate(k);
    }
    c.sort_by(order);
    c
}

/// A change to one logit before a row's best logits are selected, as a sampler's logit bias
/// and penalties make it (llama.cpp's logit-bias sampler, then its penalties sampler): the
/// bias is added; a penalized token's logit is divided by `repeat` when positive and
/// multiplied by it otherwise; then `sub` is subtracted. A token with only a bias has
/// `repeat` 1 and `sub` 0. At most [`MAX_LOGIT_ADJUST`] per row, one per token.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LogitAdjust {
    pub token: u32,
    pub bias: f32,
    pub repeat: f32,
    pub sub: f32,
}

impl LogitAdjust {
    /// The adjusted logit.
    pub fn apply(&self, logit: f32) -> f32 {
        let l = logit + self.bias;
        let l = if l <= 0.0 { l * self.repeat } else { l / self.repeat };
        l - self.sub
    }
}

/// Most [`LogitAdjust`]s one row may carry into a device selection (a sampler with more
/// reads the whole row).
pub const MAX_LOGIT_ADJUST: usize = 256;

/// [`top_k_rows`] after each row's adjustments ([`adjust_rows`]): what a backend without a
/// device selection returns for `Backend::execute_top_k`.
pub fn top_k_rows_adjusted(
    mut out: Vec<f32>,
    n_rows: usize,
    k: usize,
    adjust: &[Vec<LogitAdjust>],
) -> Vec<Vec<(u32, f32)>> {
    adjust_rows(&mut out, n_rows, adjust);
    top_k_rows(&out, n_rows, k)
}

/// Apply each row's adjustments to `out` (`n_rows` rows; rows past `adjust` have none).
pub fn adjust_rows(out: &mut [f32], n_rows: usize, adjust: &[Vec<LogitAdjust>]) {
    let cols = (out.len() / n_rows.max(1)).max(1);
    for (row, adj) in out.chunks_mut(cols).zip(adjust) {
        for a in adj {
            if let Some(l) = row.get_mut(a.token as usize) {
                *l = a.apply(*l);
            }
        }
    }
}

/// [`top_k`] of each of the `n_rows` rows of a row-major `out`.
pub fn top_k_rows(out: &[f32], n_rows: usize, k: usize) -> Vec<Vec<(u32, f32)>> {
    let cols = (out.len() / n_rows.max(1)).max(1);
    out.chunks(cols).map(|r| top_k(r, k)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_first_ties_by_index_nan_last() {
        let row = [1.0, f32::NAN, 3.0, 3.0, -2.0, 0.5];
        assert_eq!(top_k(&row, 3), vec![(2, 3.0), (3, 3.0), (0, 1.0)]);
        assert_eq!(top_k(&row, 1), vec![(2, 3.0)]);
        let all = top_k(&row, 10);
        assert_eq!(all.len(), 6);
        assert_eq!(all[5].0, 1);
        assert!(top_k(&row, 0).is_empty());
    }

    /// The one-pass path gives exactly what selection gives: ties (by index), NaN, negative
    /// rows, every small k.
    #[test]
    fn scan_equals_selection() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..40 {
            let n = 512 + case * 97;
            let row: Vec<f32> = (0..n)
                .map(|_| match next() % 50 {
                    0 => f32::NAN,
                    1..=5 => 1.5,
                    _ => (next() % 2000) as f32 / 100.0 - 10.0,
                })
                .collect();
            for k in [1, 2, 7, 40, 64, 256] {
                assert_eq!(top_k_scan(&row, k), top_k_select(&row, k), "case {case} k {k}");
                assert_eq!(top_k(&row, k), top_k_select(&row, k));
            }
        }
    }
}
