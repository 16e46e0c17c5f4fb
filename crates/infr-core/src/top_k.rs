//! The k largest entries of a logits row: what greedy and top-k sampling need, and what a
//! backend that samples on its device returns instead of whole rows.

use std::cmp::Ordering;

/// `(index, value)` pairs of the `k` largest values of `row`, best first: higher value
/// first, the lower index first among equal values, NaN below everything.
pub fn top_k(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
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
}
