//! The prefill products on f16 operands (weights dequantized beside the previous product,
//! in slices, striped or not, under a memory limit) and batched decode's split-K products,
//! against the CPU.

use infr_core::{Backend, BackendError, Graph, KvDType};
use infr_quant::GgmlType;

use crate::common::*;
use crate::matmul::K;

/// A prefill chain of matmuls, at 130 rows (on-the-fly dequantization where there are
/// cooperative matrices) and at 300 rows, large enough for the f16-operand path: each
/// product's weight was dequantized while the previous product ran (two alternating buffers,
/// no barrier between the two dispatches). Mixed weight types, a weight used by two
/// consecutive matmuls (dequantized once), a bias, two readers of one input and an inner
/// dimension of 160; the output is compared with the CPU's.
#[test]
fn prefill_matmul_chain_matches_cpu() {
    prefill_chain(infr_vulkan::VulkanOptions { validation: true, ..Default::default() }, &[130, 300]);
}

/// The chain of [`prefill_matmul_chain_matches_cpu`] with the f16 path's weight slices capped
/// at 64 KiB (larger models take this path with the default cap): `a` and `b` are
/// dequantized and multiplied in two and four slices, and `c` (one 128-row tile of it is
/// already larger) goes to the kernel that dequantizes tiles on the fly. Where the
/// cooperative kernels run, the capped plan must issue more f16 matmuls than the default.
#[test]
fn prefill_matmul_chain_in_small_slices() {
    let f16_matmuls = |f16_slice_bytes: u64| {
        let opts =
            infr_vulkan::VulkanOptions { validation: true, profile: true, f16_slice_bytes, ..Default::default() };
        let vk = prefill_chain(opts, &[300])?;
        let coop = vk.uses_coopmat();
        let n = vk.profile().map_or(0, |p| p.count("matmul_coop.f16in"));
        Some((coop, n))
    };
    let (Some((coop, whole)), Some((_, sliced))) = (f16_matmuls(0), f16_matmuls(64 << 10)) else { return };
    eprintln!("f16 matmul dispatches: {whole} whole, {sliced} in slices");
    if coop && whole > 0 {
        assert!(sliced > whole, "capped slices issued {sliced} f16 matmuls, whole weights {whole}");
    }
}

/// The prefill chain with its Q4_K and Q6_K weights dequantized to f16 in stripes (the
/// default) and a thread's 32 elements at a time (`VulkanOptions::striped_dequant`), whole
/// and in 64 KiB slices (rows from a slice's first row on); where the cooperative kernels run,
/// both kernels of the form asked for must have run.
#[test]
fn prefill_matmul_chain_striped_dequant() {
    for (striped, suffix) in [(None, ".striped"), (Some(false), "")] {
        for f16_slice_bytes in [0, 64 << 10] {
            let opts = infr_vulkan::VulkanOptions {
                validation: true,
                profile: true,
                striped_dequant: striped,
                f16_slice_bytes,
                ..Default::default()
            };
            let Some(vk) = prefill_chain(opts, &[300]) else { return };
            if vk.uses_coopmat() {
                let prof = vk.profile().expect("profiling on");
                let ran = |ty: &str| prof.count(&format!("dequant_f16.{ty}{suffix}")) > 0;
                assert!(ran("q4_K") && ran("q6_K"), "slices of {f16_slice_bytes}: {:?}", prof.totals.keys());
            }
        }
    }
}

/// Matmuls over 4 to 64 activation rows (batched decode) with inner dimensions long enough to
/// be split where there are cooperative matrices (from 10 rows; 4 rows take the integer-dot
/// weight-row tiles, their threads over several blocks each, and 12 rows do without them): a 2048-wide product in eight k ranges (with
/// a bias, added by the reduction), a 1472-wide one whose last range is shorter, one that is
/// not split (bias stored directly), and Q4_K, Q6_K, Q5_0 and Q8_0 weights. Each output must
/// equal the CPU's; where the cooperative kernels run, the split products' reduction must
/// have run.
#[test]
fn few_rows_take_split_k_products() {
    split_k_chain(false);
}

/// [`few_rows_take_split_k_products`] with the cooperative loader dequantizing Q4_K and Q6_K
/// units as read (`VulkanOptions::coop_dequant_on_read`) instead of reading raw words (the
/// default).
#[test]
fn units_dequantized_on_read_match_cpu() {
    split_k_chain(true);
}

fn split_k_chain(dequant_on_read: bool) {
    let mut rng = Rng(909);
    let mut w = Weights::default();
    let table = w.add(weight("tok", GgmlType::F32, K, 8, &mut rng, 1.0));
    let up = w.add(weight("up", GgmlType::Q4_K, K, 2048, &mut rng, 0.1));
    let down = w.add(weight("down", GgmlType::Q6_K, 2048, 320, &mut rng, 0.05));
    let bias = w.add(weight("bias", GgmlType::F32, 320, 1, &mut rng, 1.0));
    let wide = w.add(weight("wide", GgmlType::Q5_0, 320, 1472, &mut rng, 0.1));
    let back = w.add(weight("back", GgmlType::Q8_0, 1472, 136, &mut rng, 0.05));
    let opts = infr_vulkan::VulkanOptions {
        validation: true,
        profile: true,
        coop_dequant_on_read: dequant_on_read,
        ..Default::default()
    };
    let Some(mut p) = Pair::with(&w, &kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32), opts) else { return };
    let rows = [4, 12, 17, 40, 80, 200];
    for n in rows {
        let g = graph(&w, n, n, |g| {
            let x = g.embed(table);
            let h = g.linear(x, up, None);
            let d = g.linear(h, down, Some(bias));
            let e = g.linear(d, wide, None);
            g.linear(e, back, None)
        });
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % 8).collect();
        let step = Step::simple(tokens, 0, vec![0; n.div_ceil(16).max(8)]);
        p.check(&format!("split-k chain n={n}"), &g, &[step], 1e-2, 3e-2);
    }
    // Two split products (`down` and `back`) per row count on the split-K path (up to 64 rows).
    let reductions = p.vk.profile().map_or(0, |pr| pr.count("split_reduce"));
    eprintln!("cooperative matrices: {}, split reductions: {reductions}", p.vk.uses_coopmat());
    if let Some(from) = p.vk.f16_min_rows() {
        let split_rows = rows.iter().filter(|&&n| (from..=64).contains(&n)).count();
        assert_eq!(reductions, 2 * split_rows as u64, "split reductions");
    }
}

/// A feed-forward block over few rows (split-K products): the GLU adds up the gate and up
/// products' partial planes itself, and the next norm those of the down product with the
/// residual add, rounding their outputs into the next products' f16 operands; only the head's
/// reduction runs as its own dispatch. Matches the CPU, fused and unfused.
#[test]
fn fused_kernels_sum_split_k_planes() {
    let (dim, ff, vocab) = (1024, 2048, 96);
    let mut rng = Rng(77);
    let mut w = Weights::default();
    let table = w.add(weight("tok", GgmlType::F32, dim, 8, &mut rng, 1.0));
    let gate = w.add(weight("gate", GgmlType::Q4_K, dim, ff, &mut rng, 0.05));
    let up = w.add(weight("up", GgmlType::Q4_K, dim, ff, &mut rng, 0.05));
    let down = w.add(weight("down", GgmlType::Q6_K, ff, dim, &mut rng, 0.05));
    let head = w.add(weight("head", GgmlType::Q8_0, dim, vocab, &mut rng, 0.1));
    let ffn = |n: usize| {
        graph(&w, n, n, |g| {
            let x = g.embed(table);
            let h = g.rms_norm(x, None, 1e-6, dim);
            let gt = g.linear(h, gate, None);
            let u = g.linear(h, up, None);
            let a = g.glu(gt, u, infr_core::Activation::Silu);
            let d = g.linear(a, down, None);
            let s = g.add(x, d);
            let h = g.rms_norm(s, None, 1e-6, dim);
            g.linear(h, head, None)
        })
    };
    for fused in [true, false] {
        let opts = profiled(fused);
        let Some(mut p) = Pair::with(&w, &kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32), opts) else { return };
        // One 8-row activation tile size (24) as the other split-K tests, to share their
        // pipelines (sid's lavapipe compiles each cold in CI).
        let ns = [20, 24];
        for n in ns {
            let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 2) % 8).collect();
            let step = Step::simple(tokens, 0, vec![0; 8]);
            p.check(&format!("ffn n={n} fused {fused}"), &ffn(n), &[step], 1e-2, 3e-2);
        }
        if !p.vk.uses_coopmat() {
            return;
        }
        let prof = p.vk.profile().expect("profiling on");
        let kernels: Vec<&String> = prof.totals.keys().collect();
        eprintln!("fused {fused}: {kernels:?}");
        // Four split products per step (gate, up, down, head); fused, only the head's planes
        // are summed by a reduction of their own.
        assert_eq!(prof.count("split_reduce"), (if fused { 1 } else { 4 }) * ns.len() as u64, "{kernels:?}");
        assert_eq!(prof.count("norm_q8_f16"), if fused { 2 * ns.len() as u64 } else { 0 }, "{kernels:?}");
        assert_eq!(prof.count("glu_silu_q8_f16"), if fused { ns.len() as u64 } else { 0 }, "{kernels:?}");
    }
}

/// Run the prefill chain for each row count in `ns` on a Vulkan backend opened with `opts`
/// and on the CPU, comparing outputs; the Vulkan backend afterwards (None without Vulkan).
fn prefill_chain(opts: infr_vulkan::VulkanOptions, ns: &[usize]) -> Option<infr_vulkan::VulkanBackend> {
    let (w, _) = chain_weights_and_graph(1);
    let mut p = Pair::with(&w, &kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32), opts)?;
    for &n in ns {
        let (_, g) = chain_weights_and_graph(n);
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % 8).collect();
        let step = Step::simple(tokens, 0, vec![0; n.div_ceil(16).max(8)]);
        p.check(&format!("prefill chain n={n}"), &g, &[step], 1e-2, 3e-2);
    }
    Some(p.vk)
}

/// The weights of the prefill chain (same on every call) and its graph over `n` tokens:
/// mixed weight types, a weight used by two consecutive matmuls, a bias, two readers of one
/// input and an inner dimension of 160.
fn chain_weights_and_graph(n: usize) -> (Weights, Graph) {
    let mut rng = Rng(321);
    let mut w = Weights::default();
    let table = w.add(weight("tok", GgmlType::F32, K, 8, &mut rng, 1.0));
    let a = w.add(weight("a", GgmlType::Q4_K, K, K, &mut rng, 0.1));
    let b = w.add(weight("b", GgmlType::Q6_K, K, 2 * K, &mut rng, 0.05));
    let c = w.add(weight("c", GgmlType::Q8_0, 2 * K, K, &mut rng, 0.05));
    let bias = w.add(weight("bias", GgmlType::F32, K, 1, &mut rng, 1.0));
    // An inner dimension of 160: an odd number of 64-wide k-steps, the last one partial (the
    // read-ahead of two steps runs one step wholly past k).
    let d = w.add(weight("d", GgmlType::Q8_0, K, 160, &mut rng, 0.05));
    let e = w.add(weight("e", GgmlType::Q8_0, 160, K, &mut rng, 0.1));
    let g = graph(&w, n, n, |g| {
        let x = g.embed(table);
        let y1 = g.linear(x, a, None);
        let y2 = g.linear(y1, b, None);
        let y3 = g.linear(y2, c, Some(bias));
        let y4 = g.linear(y3, a, None);
        let y5 = g.linear(y3, a, Some(bias));
        let y6 = g.linear(y5, d, None);
        let y7 = g.linear(y6, e, None);
        let s = g.add(y4, y5);
        g.add(s, y7)
    });
    (w, g)
}

/// A prefill plan that fits the memory limit only without the f16 path's buffers
/// (dequantized weights, f16 activations) is planned without them and still matches the
/// CPU; one that does not fit either way is an out-of-memory error.
#[test]
fn prefill_plan_past_the_memory_limit_drops_the_f16_path() {
    let plain_opts = |memory_limit: u64, f16_slice_bytes: u64| infr_vulkan::VulkanOptions {
        validation: true,
        profile: true,
        memory_limit,
        f16_slice_bytes,
        ..Default::default()
    };
    // Plan sizes with and without the f16 path (a 1-byte slice cap leaves no matmul eligible).
    let measure = |f16_slice_bytes: u64| -> Option<(u64, u64)> {
        let mut vk = prefill_chain(plain_opts(0, f16_slice_bytes), &[])?;
        let base = vk.device_bytes();
        vk.compile(&chain_weights_and_graph(300).1).unwrap();
        Some((base, vk.device_bytes() - base))
    };
    let (Some((base, with_f16)), Some((_, without))) = (measure(0), measure(1)) else { return };
    eprintln!("prefill plan: {with_f16} bytes with the f16 path, {without} without");
    let f16_dispatches = |vk: &infr_vulkan::VulkanBackend| vk.profile().map_or(0, |p| p.count("matmul_coop.f16in"));
    let Some(vk) = prefill_chain(plain_opts(base + without, 0), &[300]) else { return };
    assert_eq!(f16_dispatches(&vk), 0, "the plan under the limit used the f16 path");
    if with_f16 <= without {
        eprintln!("the f16 path takes no extra memory here (no cooperative matrices?)");
    }
    // Not even the plain plan fits: an out-of-memory error, not a crash.
    let Some(mut vk) = prefill_chain(plain_opts(base + without / 2, 0), &[]) else { return };
    match vk.compile(&chain_weights_and_graph(300).1) {
        Err(BackendError::OutOfMemory { .. }) => {}
        other => panic!("a plan over the limit: {other:?}"),
    }
}
