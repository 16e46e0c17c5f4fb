//! Per-op timing shared by all backends (`INFR_PROF_OPS=1`): each backend measures its
//! dispatches (GPU timestamps, CPU wall time) and feeds them here, labelled by kernel; a
//! block per submit is printed and one aggregated report at exit.
//! `INFR_PROF_OP_SHAPES=1` itemizes matmuls by shape.

use std::collections::BTreeMap;
use std::sync::Mutex;

use std::sync::atomic::{AtomicBool, Ordering};

static PROF_OPS: AtomicBool = AtomicBool::new(false);
static PROF_SHAPES: AtomicBool = AtomicBool::new(false);

/// Turn per-op profiling on or off for backends created from now on (the configuration's
/// `prof.ops` and `prof.op_shapes`, which `INFR_PROF_OPS` / `INFR_PROF_OP_SHAPES` set).
pub fn set_profiling(ops: bool, by_shape: bool) {
    PROF_OPS.store(ops, Ordering::Relaxed);
    PROF_SHAPES.store(by_shape, Ordering::Relaxed);
}

/// Whether per-op profiling is on.
pub fn prof_enabled() -> bool {
    PROF_OPS.load(Ordering::Relaxed)
}

/// Whether matmuls are itemized by shape.
pub fn prof_by_shape() -> bool {
    PROF_SHAPES.load(Ordering::Relaxed)
}

/// Label of one measured dispatch.
#[derive(Debug, Clone)]
pub struct OpLabel {
    /// Node label (`blk.3`) or op name.
    pub node: String,
    /// Kernel name (`linear.q4_K`, `attention`…).
    pub kernel: String,
    /// Shape key for matmuls (`1536x8960 n=1`), if any.
    pub shape: Option<String>,
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

/// Totals per kernel key over a run.
#[derive(Debug, Default)]
pub struct Profile {
    backend: String,
    totals: BTreeMap<String, (u64, f64)>,
    submits: u64,
}

impl Profile {
    /// An empty profile for a backend (its name prefixes the report).
    pub fn new(backend: &str) -> Self {
        Self { backend: backend.to_owned(), ..Default::default() }
    }

    /// Add one submit's durations (`ns[i]` for `labels[i]`); prints them when `print`.
    pub fn add_submit(&mut self, labels: &[OpLabel], ns: &[f64], print: bool) {
        let shapes = prof_by_shape();
        self.submits += 1;
        if print {
            let total: f64 = ns.iter().sum();
            eprintln!("[{} prof] submit {}: {} ops, {:.1} us", self.backend, self.submits, ns.len(), total / 1e3);
            for (l, &t) in labels.iter().zip(ns) {
                eprintln!("  {:>10.1} us  {:<16} {}", t / 1e3, l.node, l.key(true));
            }
        }
        for (l, &t) in labels.iter().zip(ns) {
            let e = self.totals.entry(l.key(shapes)).or_insert((0, 0.0));
            e.0 += 1;
            e.1 += t;
        }
    }

    /// Submits recorded.
    pub fn submits(&self) -> u64 {
        self.submits
    }

    /// The aggregate as printable lines, slowest first.
    pub fn report(&self) -> Vec<String> {
        let total: f64 = self.totals.values().map(|v| v.1).sum();
        let mut rows: Vec<_> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        let mut out = vec![format!("[{} prof] {} submits, {:.3} ms in ops", self.backend, self.submits, total / 1e6)];
        for (k, (n, t)) in rows {
            let pct = if total > 0.0 { 100.0 * t / total } else { 0.0 };
            out.push(format!("  {:>10.3} ms {:>5.1}% {:>8} x  {k}", t / 1e6, pct, n));
        }
        out
    }
}

/// A profile printed when dropped (the backend owns one; dropping at exit prints the report).
#[derive(Debug)]
pub struct ProfileOnDrop(pub Mutex<Profile>);

impl Drop for ProfileOnDrop {
    fn drop(&mut self) {
        if let Ok(p) = self.0.lock() {
            if p.submits() > 0 {
                for l in p.report() {
                    eprintln!("{l}");
                }
            }
        }
    }
}
