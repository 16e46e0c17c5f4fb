//! Linear layers on quantized weights: `out[n, m] = x[n, k] · W[m, k]ᵀ`.
//!
//! Like llama.cpp's `ggml_compute_forward_mul_mat`, the activations are first converted to the
//! weight type's dot partner (`vec_dot_type`): Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4…, Q8_1 for
//! Q4_1/Q5_1, Q8_K for the k- and i-quants, f16/bf16 for half-precision weights. The
//! reference tier then dequantizes both sides and multiplies in f32; the fast tier (SIMD
//! integer dot products, chosen at run time) must agree with it to rounding.

use infr_quant::GgmlType;
use rayon::prelude::*;

use crate::backend::CpuWeight;

/// Which kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelTier {
    /// Plain scalar code: dequantize and multiply in f32.
    Reference,
    /// The fastest kernels this CPU supports (falls back to reference per type).
    Fast,
}

/// The activation format llama.cpp pairs with a weight type (`type_traits_cpu[..].vec_dot_type`).
pub fn act_type_for(w: GgmlType) -> GgmlType {
    use GgmlType::*;
    match w {
        F32 => F32,
        F16 => F16,
        BF16 => BF16,
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | MXFP4 | NVFP4 | Q1_0 | Q2_0 => Q8_0,
        Q4_1 | Q5_1 | Q8_1 => Q8_1,
        _ => Q8_K,
    }
}

/// Activations converted for one weight type: the quantized bytes (for integer kernels) and,
/// when the reference kernel needs them, the same values dequantized back to f32.
pub(crate) struct PreparedActs {
    pub bytes: Vec<u8>,
    pub row_bytes: usize,
    pub f32: Vec<f32>,
    /// For Q8_0 rows: the integer sum of each 32-value block (packed kernels subtract the
    /// weights' unsigned offset with it).
    pub sums: Vec<i32>,
}

/// Convert `n` rows of `k` activations for weights of type `w_ty`; `want_f32` also keeps the
/// dequantized values (the reference kernel multiplies in f32).
pub(crate) fn prepare_acts(x: &[f32], k: usize, w_ty: GgmlType, want_f32: bool) -> PreparedActs {
    let act_ty = act_type_for(w_ty);
    if act_ty == GgmlType::F32 {
        return PreparedActs { bytes: Vec::new(), row_bytes: 0, f32: x.to_vec(), sums: Vec::new() };
    }
    let row_bytes = act_ty.row_bytes(k).expect("activation width is block aligned (checked at compile)");
    let n = x.len() / k;
    let mut bytes = vec![0u8; n * row_bytes];
    let mut f32s = vec![0f32; if want_f32 { n * k } else { 0 }];
    let quantize_row = |(row, q): (&[f32], &mut [u8])| {
        if !crate::simd::vecf::quantize_q8_row(act_ty, row, q) {
            infr_quant::quantize_into(act_ty, row, q).expect("aligned activation row");
        }
    };
    // Rows of a few blocks are quick: tasks of several rows each.
    let min_rows = (4096 / k.max(1)).max(1);
    x.par_chunks(k).zip(bytes.par_chunks_mut(row_bytes)).with_min_len(min_rows).for_each(quantize_row);
    if want_f32 {
        f32s.par_chunks_mut(k).zip(bytes.par_chunks(row_bytes)).for_each(|(f, q)| {
            infr_quant::dequantize(act_ty, q, f).expect("round trip of our own blocks");
        });
    }
    let sums = if act_ty == GgmlType::Q8_0 {
        // Q8_0 block: f16 scale, then 32 i8.
        bytes.chunks_exact(act_ty.info().type_size).map(|b| b[2..].iter().map(|&v| v as i8 as i32).sum()).collect()
    } else {
        Vec::new()
    };
    PreparedActs { bytes, row_bytes, f32: f32s, sums }
}

/// f32 dot product with 8 independent accumulators (vectorizes without fast-math).
#[inline]
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0f32;
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]) + s
}

/// Weight rows per parallel task.
const ROWS_PER_TASK: usize = 16;
/// Activation rows per inner tile (keeps the tile in L2 while weight rows stream through L1).
const ACT_TILE: usize = 32;

/// Whether `linear` will use the fast kernel for this weight type.
pub(crate) fn uses_fast(tier: KernelTier, ty: GgmlType) -> bool {
    tier == KernelTier::Fast && crate::simd::supports(ty)
}

/// `out[n, m] = x[n, k] · Wᵀ (+ bias)`, with activations already prepared for `w.ty`.
pub(crate) fn linear(
    tier: KernelTier,
    acts: &PreparedActs,
    n: usize,
    w: &CpuWeight,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let (k, m) = (w.cols, w.rows);
    if tier == KernelTier::Fast {
        if let Some(pw) = &w.packed {
            linear_packed(crate::simd::level(), pw, acts, n, out, m);
            add_bias(out, m, bias);
            return;
        }
    }
    let fast = uses_fast(tier, w.ty);
    let row_bytes = w.row_bytes;
    // Each task computes a block of weight rows for every activation row: res[j][i].
    let blocks: Vec<Vec<f32>> = (0..m.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .map(|b| {
            let j0 = b * ROWS_PER_TASK;
            let j1 = (j0 + ROWS_PER_TASK).min(m);
            let mut res = vec![0f32; (j1 - j0) * n];
            let mut wrow = if fast { Vec::new() } else { vec![0f32; k] };
            if fast {
                // res is [weight row][activation row]; tile activations to stay in cache.
                let wb = &w.bytes[j0 * row_bytes..j1 * row_bytes];
                let mut tile = vec![0f32; (j1 - j0) * ACT_TILE];
                for i0 in (0..n).step_by(ACT_TILE) {
                    let i1 = (i0 + ACT_TILE).min(n);
                    let a = &acts.bytes[i0 * acts.row_bytes..i1 * acts.row_bytes];
                    let done =
                        crate::simd::dot_tile(w.ty, wb, row_bytes, j1 - j0, a, acts.row_bytes, i1 - i0, &mut tile);
                    debug_assert!(done, "fast kernel declined {}", w.ty);
                    for jj in 0..j1 - j0 {
                        res[jj * n + i0..jj * n + i1].copy_from_slice(&tile[jj * (i1 - i0)..(jj + 1) * (i1 - i0)]);
                    }
                }
                return res;
            }
            for i0 in (0..n).step_by(ACT_TILE) {
                let i1 = (i0 + ACT_TILE).min(n);
                for j in j0..j1 {
                    let wb = &w.bytes[j * row_bytes..(j + 1) * row_bytes];
                    let r = &mut res[(j - j0) * n + i0..(j - j0) * n + i1];
                    infr_quant::dequantize(w.ty, wb, &mut wrow).expect("weight row validated at load");
                    for (ii, o) in r.iter_mut().enumerate() {
                        let i = i0 + ii;
                        *o = dot_f32(&wrow, &acts.f32[i * k..(i + 1) * k]);
                    }
                }
            }
            res
        })
        .collect();
    for (b, res) in blocks.iter().enumerate() {
        let j0 = b * ROWS_PER_TASK;
        let cnt = res.len() / n;
        for jj in 0..cnt {
            for i in 0..n {
                out[i * m + j0 + jj] = res[jj * n + i];
            }
        }
    }
    add_bias(out, m, bias);
}

fn add_bias(out: &mut [f32], m: usize, bias: Option<&[f32]>) {
    if let Some(bias) = bias {
        for row in out.chunks_mut(m) {
            for (o, b) in row.iter_mut().zip(bias) {
                *o += b;
            }
        }
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
#[derive(Clone, Copy)]
struct SharedOut(*mut f32);
// SAFETY: tasks write disjoint (row group, activation row) elements; see `linear_packed`.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// The pointer (a method, so closures capture the whole `Send` wrapper).
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// Bytes of activations kept hot while a task's weight groups stream past them.
const ACT_TILE_BYTES: usize = 32 << 10;

/// One matmul of a fused packed call: weights, their prepared activations, the `[n, rows]`
/// output and its bias.
pub(crate) struct PackedJob<'a> {
    pub w: &'a CpuWeight,
    pub acts: &'a PreparedActs,
    pub out: &'a mut [f32],
    pub bias: Option<&'a [f32]>,
}

/// Several matmuls over the same `n` activation rows (q/k/v, gate/up) in one parallel region:
/// one wake-up of the thread pool instead of one per matmul, which is a good part of a
/// decode step's cost on a small model. Falls back to [`linear`] one by one unless every
/// weight is packed and the fast tier runs.
pub(crate) fn linear_many(tier: KernelTier, n: usize, jobs: &mut [PackedJob<'_>]) {
    let fused = tier == KernelTier::Fast && jobs.iter().all(|j| j.w.packed.is_some());
    if !fused || jobs.len() < 2 {
        for j in jobs.iter_mut() {
            linear(tier, j.acts, n, j.w, j.bias, j.out);
        }
        return;
    }
    let level = crate::simd::level();
    let items: Vec<PackedItem<'_>> = jobs
        .iter_mut()
        .map(|j| PackedItem {
            pw: j.w.packed.as_ref().expect("checked above"),
            acts: j.acts,
            out: SharedOut(j.out.as_mut_ptr()),
            out_len: j.out.len(),
        })
        .collect();
    run_packed(level, &items, n);
    for j in jobs.iter_mut() {
        add_bias(j.out, j.w.rows, j.bias);
    }
}

/// A packed matmul as the parallel tasks see it.
struct PackedItem<'a> {
    pw: &'a crate::simd::pack::PackedWeight,
    acts: &'a PreparedActs,
    out: SharedOut,
    out_len: usize,
}

/// `out[n, m] = x · Wᵀ` on 16-row packed weights.
fn linear_packed(
    level: crate::simd::SimdLevel,
    pw: &crate::simd::pack::PackedWeight,
    acts: &PreparedActs,
    n: usize,
    out: &mut [f32],
    m: usize,
) {
    assert_eq!(pw.rows, m, "packed linear output shape");
    let item = PackedItem { pw, acts, out: SharedOut(out.as_mut_ptr()), out_len: out.len() };
    run_packed(level, std::slice::from_ref(&item), n);
}

/// Every item's matmul in one parallel region: tasks own runs of one item's row groups (so
/// their writes never overlap); within a task, activation tiles stay in L1 across the groups.
fn run_packed(level: crate::simd::SimdLevel, items: &[PackedItem<'_>], n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let threads = rayon::current_num_threads().max(1);
        // (item, first group, end group) per task.
        let mut tasks = Vec::new();
        for (k, it) in items.iter().enumerate() {
            assert!(it.out_len >= n * it.pw.rows, "packed linear output shape");
            let chunk = it.pw.groups.div_ceil(threads * 4).max(1);
            for g0 in (0..it.pw.groups).step_by(chunk) {
                tasks.push((k, g0, (g0 + chunk).min(it.pw.groups)));
            }
        }
        tasks.into_par_iter().for_each(|(k, g0, g1)| {
            let it = &items[k];
            let (pw, m) = (it.pw, it.pw.rows);
            let a = act_rows(it.acts);
            let (kernel, per) =
                crate::simd::packed_kernel(level, pw.ty).expect("weights are packed only with a kernel");
            let tile = (ACT_TILE_BYTES / it.acts.row_bytes.max(1)).max(per).next_multiple_of(per);
            for i0 in (0..n).step_by(tile) {
                let i1 = (i0 + tile).min(n);
                for g in g0..g1 {
                    let mut i = i0;
                    while i < i1 {
                        let r = (i1 - i).min(per);
                        // SAFETY: `level` is one this CPU has (`simd::level`/`available`); this
                        // task alone writes the columns of groups g0..g1 of this item's output,
                        // which holds n * m values (asserted above) and outlives the region.
                        let done = unsafe { kernel(pw, g, &a, i, r, it.out.get(), m) };
                        assert!(done, "packed kernel rejected its inputs");
                        i += r;
                    }
                }
            }
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (level, items, n);
        unreachable!("weights are packed only on x86-64");
    }
}

/// Prepared activations as the packed kernels read them.
#[cfg(target_arch = "x86_64")]
fn act_rows(acts: &PreparedActs) -> crate::simd::acts::ActRows<'_> {
    crate::simd::acts::ActRows { bytes: &acts.bytes, stride: acts.row_bytes, sums: &acts.sums }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infr_gguf::TensorData;

    /// Deterministic pseudo-random floats in [-1, 1).
    fn randoms(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn weight(ty: GgmlType, rows: usize, cols: usize) -> CpuWeight {
        let bytes = infr_quant::quantize(ty, &randoms(rows * cols, 7)).unwrap();
        let mut w = CpuWeight::new(ty, cols, rows, TensorData::from_vec(bytes), None);
        w.pack_for_matmul();
        w
    }

    /// The fast kernels agree with the reference kernel (dequantize + f32 dot) on every type
    /// they cover, for single rows (decode) and row batches (prefill, with a ragged tail).
    #[test]
    /// Both fast paths are checked where the CPU has them: the 16-row packed kernels
    /// (AVX-512 VNNI) and the in-place AVX2 kernels (the weight left unpacked).
    fn fast_kernels_match_reference() {
        let (m, k) = (37, 512);
        for ty in [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ] {
            let packed = weight(ty, m, k);
            assert_eq!(packed.packed.is_some(), crate::simd::packs(ty), "{ty} packed when the CPU has kernels");
            let mut unpacked = weight(ty, m, k);
            unpacked.packed = None;
            // The packed kernels of every level this CPU has (linear() uses the best one).
            let levels: Vec<_> = if packed.packed.is_some() {
                crate::simd::available().into_iter().filter(|&l| l != crate::simd::SimdLevel::None).collect()
            } else {
                Vec::new()
            };
            let mut paths: Vec<(String, &CpuWeight, Option<crate::simd::SimdLevel>)> =
                levels.into_iter().map(|l| (format!("packed {l:?}"), &packed, Some(l))).collect();
            paths.push(("in place".into(), &unpacked, None));
            for (path, w, level) in paths {
                for n in [1, 3, 70] {
                    let x = randoms(n * k, 11 + n as u64);
                    let mut fast = vec![0f32; n * m];
                    let mut reference = vec![0f32; n * m];
                    match (level, &w.packed) {
                        (Some(l), Some(pw)) => linear_packed(l, pw, &prepare_acts(&x, k, ty, false), n, &mut fast, m),
                        _ => linear(KernelTier::Fast, &prepare_acts(&x, k, ty, false), n, w, None, &mut fast),
                    }
                    linear(KernelTier::Reference, &prepare_acts(&x, k, ty, true), n, w, None, &mut reference);
                    // Q4_1 uses the activation block's f16 sum `s` (as llama.cpp does) where the
                    // reference sums the dequantized values exactly: allow that rounding.
                    let abs_tol = if ty == GgmlType::Q4_1 { 2e-2 } else { 1e-3 };
                    for (i, (a, b)) in fast.iter().zip(&reference).enumerate() {
                        assert!(
                            (a - b).abs() <= abs_tol + 1e-3 * b.abs(),
                            "{ty} {path} n={n} [{i}]: fast {a} vs reference {b}"
                        );
                    }
                }
            }
        }
    }

    /// Weights at their largest quant values against activations at +127 everywhere: the
    /// packed kernels' integer sums (plain AVX2 keeps several chunks in i16) must not
    /// overflow. Rows whose 32-element blocks start with the value that sets the scale (-1, or
    /// 0 for types with a minimum) and continue with the value that quantizes to the top code.
    #[test]
    fn packed_sums_hold_the_largest_values() {
        let (m, k) = (16, 512);
        for (ty, first, rest) in [
            (GgmlType::Q4_0, -1.0, 0.875),
            (GgmlType::Q5_0, -1.0, 0.9375),
            (GgmlType::Q4_1, 0.0, 1.0),
            (GgmlType::Q4_K, 0.0, 1.0),
            (GgmlType::Q5_K, 0.0, 1.0),
        ] {
            let values: Vec<f32> = (0..m * k).map(|i| if i % 32 == 0 { first } else { rest }).collect();
            let bytes = infr_quant::quantize(ty, &values).unwrap();
            let mut w = CpuWeight::new(ty, k, m, TensorData::from_vec(bytes), None);
            w.pack_for_matmul();
            let Some(pw) = &w.packed else { continue };
            let x = vec![1.0f32; 4 * k];
            let mut reference = vec![0f32; 4 * m];
            linear(KernelTier::Reference, &prepare_acts(&x, k, ty, true), 4, &w, None, &mut reference);
            for level in crate::simd::available().into_iter().filter(|&l| l != crate::simd::SimdLevel::None) {
                let mut fast = vec![0f32; 4 * m];
                linear_packed(level, pw, &prepare_acts(&x, k, ty, false), 4, &mut fast, m);
                for (a, b) in fast.iter().zip(&reference) {
                    assert!((a - b).abs() <= 1e-2 * b.abs().max(1.0), "{ty} {level:?}: fast {a} vs reference {b}");
                }
            }
        }
    }

    /// A fused run of matmuls (q/k/v style: one input, several weights and types, a bias)
    /// gives exactly what each matmul gives alone.
    #[test]
    fn fused_run_equals_separate_matmuls() {
        let k = 512;
        let ws = [weight(GgmlType::Q4_K, 40, k), weight(GgmlType::Q8_0, 17, k), weight(GgmlType::Q6_K, 33, k)];
        let bias: Vec<f32> = (0..17).map(|i| i as f32 * 0.25).collect();
        for n in [1, 5] {
            let x = randoms(n * k, 5 + n as u64);
            let acts: Vec<PreparedActs> = ws.iter().map(|w| prepare_acts(&x, k, w.ty, false)).collect();
            let biases = [None, Some(bias.as_slice()), None];
            let mut alone: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; n * w.rows]).collect();
            for (((w, a), out), b) in ws.iter().zip(&acts).zip(alone.iter_mut()).zip(biases) {
                linear(KernelTier::Fast, a, n, w, b, out);
            }
            let mut fused: Vec<Vec<f32>> = ws.iter().map(|w| vec![0f32; n * w.rows]).collect();
            let mut jobs: Vec<PackedJob<'_>> = ws
                .iter()
                .zip(&acts)
                .zip(fused.iter_mut())
                .zip(biases)
                .map(|(((w, acts), out), bias)| PackedJob { w, acts, out, bias })
                .collect();
            linear_many(KernelTier::Fast, n, &mut jobs);
            assert_eq!(alone, fused, "n={n}");
        }
    }

    #[test]
    fn bias_is_added() {
        let w = weight(GgmlType::Q8_0, 4, 32);
        let x = randoms(32, 3);
        let acts = prepare_acts(&x, 32, GgmlType::Q8_0, true);
        let mut a = vec![0f32; 4];
        let mut b = vec![0f32; 4];
        linear(KernelTier::Reference, &acts, 1, &w, None, &mut a);
        linear(KernelTier::Reference, &acts, 1, &w, Some(&[1.0, 2.0, 3.0, 4.0]), &mut b);
        for i in 0..4 {
            assert!((b[i] - a[i] - (i + 1) as f32).abs() < 1e-5);
        }
    }
}
