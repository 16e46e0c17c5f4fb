//! Per-dispatch GPU timing (`INFR_PROF_OPS=1`): timestamp queries around every dispatch,
//! labelled by node label and kernel, printed per submit and aggregated over the run
//! (`INFR_PROF_OP_SHAPES=1` itemizes matmuls by shape).

use std::collections::BTreeMap;

/// Label of one dispatch in a profile.
#[derive(Debug, Clone)]
pub struct OpLabel {
    /// Node label (`blk.3.attn_q`) or op name.
    pub node: String,
    /// Kernel name (`matmul_generic.q4_K`).
    pub kernel: String,
    /// Shape key for matmuls (`4096x4096 n=1`), if any.
    pub shape: Option<String>,
    /// Weight bytes the dispatch reads (a dense matmul's whole weight; 0 where not known),
    /// for the achieved bandwidth column.
    pub weight_bytes: u64,
}

impl OpLabel {
    /// The aggregation key: kernel, plus shape when itemizing.
    pub fn key(&self, shapes: bool) -> String {
        match (&self.shape, shapes) {
            (Some(s), true) => format!("{} {s}", self.kernel),
            _ => self.kernel.clone(),
        }
    }
}

/// Totals per key.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    /// key → (dispatches, total nanoseconds, weight bytes read).
    pub totals: BTreeMap<String, (u64, f64, u64)>,
    /// Submits recorded.
    pub submits: u64,
}

impl Profile {
    /// Dispatches recorded under `key` (a kernel name, as the totals are keyed without shapes).
    pub fn count(&self, key: &str) -> u64 {
        self.totals.get(key).map_or(0, |t| t.0)
    }

    /// Add one submit's durations (`ns[i]` for `labels[i]`); prints them when `print`.
    pub fn add_submit(&mut self, labels: &[OpLabel], ns: &[f64], print: bool) {
        let shapes = infr_core::prof_by_shape();
        self.submits += 1;
        let total: f64 = ns.iter().sum();
        if print {
            eprintln!("[infr-vulkan prof] submit {}: {} dispatches, {:.1} us", self.submits, ns.len(), total / 1e3);
        }
        for (l, &t) in labels.iter().zip(ns) {
            if print {
                eprintln!("  {:>10.1} us  {:<28} {}{}", t / 1e3, l.node, l.key(true), gbps(l.weight_bytes, t));
            }
            let e = self.totals.entry(l.key(shapes)).or_insert((0, 0.0, 0));
            e.0 += 1;
            e.1 += t;
            e.2 += l.weight_bytes;
        }
    }

    /// The aggregate as printable lines, slowest first.
    pub fn report(&self) -> Vec<String> {
        let total: f64 = self.totals.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut out = vec![format!("[infr-vulkan prof] {} submits, {:.3} ms GPU time", self.submits, total / 1e6)];
        for (k, (n, t, b)) in rows {
            let pct = if total > 0.0 { 100.0 * t / total } else { 0.0 };
            out.push(format!("  {:>10.3} ms {:>5.1}% {:>8} x  {k}{}", t / 1e6, pct, n, gbps(*b, *t)));
        }
        out
    }
}

/// ` (N GB/s)`: weight bytes over GPU time, the share of memory bandwidth a matmul reached;
/// empty where the bytes are not known.
fn gbps(bytes: u64, ns: f64) -> String {
    if bytes == 0 || ns <= 0.0 {
        return String::new();
    }
    format!("  ({:.0} GB/s of weights)", bytes as f64 / ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_weight_bandwidth_where_bytes_are_known() {
        let label =
            |kernel: &str, weight_bytes| OpLabel { node: "n".into(), kernel: kernel.into(), shape: None, weight_bytes };
        let mut p = Profile::default();
        p.add_submit(&[label("gemv", 2_000_000), label("norm", 0)], &[1_000.0, 500.0], false);
        p.add_submit(&[label("gemv", 2_000_000), label("norm", 0)], &[1_000.0, 500.0], false);
        let r = p.report();
        assert!(r[1].contains("gemv") && r[1].contains("(2000 GB/s of weights)"), "{r:?}");
        assert!(r[2].contains("norm") && !r[2].contains("GB/s"), "{r:?}");
    }
}
