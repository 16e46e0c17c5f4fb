//! Parity of the elementwise, norm, RoPE, gather and KV-page ops against the CPU reference
//! backend (attention is in `attention.rs`).

use infr_core::{
    Activation, AttnParams, Backend, GraphBuilder, KvDType, RopeMode, RopeParams, RopeScaling, TensorId, WeightId,
};
use infr_quant::GgmlType;

use crate::attention::attn_params;
use crate::common::*;

pub(crate) const VOCAB: usize = 16;

/// Query, key and value rows of the step's tokens from three embedding tables.
pub(crate) fn embed_qkv(
    g: &mut GraphBuilder<'_>,
    tq: WeightId,
    tk: WeightId,
    tv: WeightId,
) -> (TensorId, TensorId, TensorId) {
    (g.embed(tq), g.embed(tk), g.embed(tv))
}

pub(crate) fn table(w: &mut Weights, rng: &mut Rng, cols: usize, scale: f32) -> WeightId {
    w.add(weight("t", GgmlType::F32, cols, VOCAB, rng, scale))
}

/// Embedding tables of attention's q, k and v (in that order) for `nh` query and `nkv` KV
/// heads of `dk` / `dv` elements.
pub(crate) fn qkv_tables(
    w: &mut Weights,
    rng: &mut Rng,
    nh: u32,
    nkv: u32,
    dk: u32,
    dv: u32,
) -> (WeightId, WeightId, WeightId) {
    let tq = table(w, rng, (nh * dk) as usize, 1.0);
    let tk = table(w, rng, (nkv * dk) as usize, 1.0);
    let tv = table(w, rng, (nkv * dv) as usize, 1.0);
    (tq, tk, tv)
}

pub(crate) fn tokens(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| (i * 7 + salt) % VOCAB as u32).collect()
}

pub(crate) fn small_kv() -> infr_core::KvSpec {
    kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16)
}

#[test]
fn elementwise_ops() {
    let mut rng = Rng(11);
    let mut w = Weights::default();
    let (ta, tb) = (table(&mut w, &mut rng, 96, 4.0), table(&mut w, &mut rng, 96, 3.0));
    let Some(mut p) = Pair::new(&w, &small_kv()) else { return };
    type Build = fn(&mut infr_core::GraphBuilder<'_>, TensorId, TensorId) -> TensorId;
    let cases: [(&str, Build); 7] = [
        ("add", |g, a, b| g.add(a, b)),
        ("mul", |g, a, b| g.mul(a, b)),
        ("scale", |g, a, _| g.scale(a, -0.37)),
        ("softcap", |g, a, _| g.softcap(a, 1.5)),
        ("glu_silu", |g, a, b| g.glu(a, b, Activation::Silu)),
        ("glu_gelu", |g, a, b| g.glu(a, b, Activation::GeluTanh)),
        // Scaled so that both clamps (gate at 7, up at ±7) bite.
        ("glu_swiglu_oai", |g, a, b| {
            let (a, b) = (g.scale(a, 3.0), g.scale(b, 4.0));
            g.glu(a, b, Activation::SwigluOai)
        }),
    ];
    for (name, f) in cases {
        let g = graph(&w, 5, 5, |g| {
            let a = g.embed(ta);
            let b = g.embed(tb);
            f(g, a, b)
        });
        p.check(name, &g, &[Step::simple(tokens(5, 1), 0, vec![0])], 1e-5, 1e-5);
    }
}

#[test]
fn rms_norm_groups_and_weights() {
    let mut rng = Rng(12);
    let mut w = Weights::default();
    let t = table(&mut w, &mut rng, 256, 2.0);
    let w_row = w.add(weight("nw", GgmlType::F32, 256, 1, &mut rng, 1.0));
    let w_head = w.add(weight("hw", GgmlType::F32, 64, 1, &mut rng, 1.0));
    let w_f16 = w.add(weight("hw16", GgmlType::F16, 64, 1, &mut rng, 1.0));
    let Some(mut p) = Pair::new(&w, &small_kv()) else { return };
    for (name, weight, group) in [
        ("row", Some(w_row), 256),
        ("head", Some(w_head), 64),
        ("head f16 weight", Some(w_f16), 64),
        ("plain", None, 128),
    ] {
        let g = graph(&w, 3, 3, |g| {
            let x = g.embed(t);
            g.rms_norm(x, weight, 1e-6, group)
        });
        p.check(name, &g, &[Step::simple(tokens(3, 2), 0, vec![0])], 1e-5, 1e-5);
    }
}

/// Runs of whole-row norms, adds and scales as Gemma's sandwich norms chain them (both
/// operands normed; a norm, the residual add and a scale; a norm and a scale) run as one
/// `norm_add` dispatch each where the device has subgroups, and match the CPU fused or not;
/// rows that span several passes of the workgroup and that are not a multiple of 32 wide.
#[test]
fn sandwich_norm_runs_fuse() {
    for cols in [200usize, 1100] {
        let mut rng = Rng(13);
        let mut w = Weights::default();
        let (ta, tb) = (table(&mut w, &mut rng, cols, 3.0), table(&mut w, &mut rng, cols, 2.0));
        let nw: Vec<WeightId> =
            (0..3).map(|i| w.add(weight(&format!("nw{i}"), GgmlType::F32, cols, 1, &mut rng, 1.0))).collect();
        let g = graph(&w, 5, 5, |g| {
            let (x, y) = (g.embed(ta), g.embed(tb));
            let (a, b) = (g.rms_norm(x, Some(nw[0]), 1e-6, cols), g.rms_norm(y, Some(nw[1]), 1e-5, cols));
            let s = g.add(a, b);
            let c = g.rms_norm(s, Some(nw[2]), 1e-6, cols);
            let d = g.add(c, x);
            let e = g.scale(d, 0.7);
            let r = g.rms_norm(e, None, 1e-6, cols);
            let r = g.scale(r, 0.3);
            g.add(r, e)
        });
        for fused in [true, false] {
            let Some(mut p) = Pair::with(&w, &small_kv(), profiled(fused)) else { return };
            p.check(&format!("{cols} cols fused {fused}"), &g, &[Step::simple(tokens(5, 4), 0, vec![0])], 1e-5, 1e-5);
            let prof = p.vk.profile().expect("profiling on");
            let fuses = fused && p.vk.has_subgroups();
            let want = if fuses { (3, 0) } else { (0, 4) };
            assert_eq!(
                (prof.count("norm_add"), prof.count("rms_norm")),
                want,
                "{cols} cols fused {fused}: {:?}",
                prof.totals.keys()
            );
        }
    }
}

/// The sandwich norm after attention, its residual add and the next pre-norm whose output a
/// decode matmul reads: one `norm_q8` dispatch norms the add's operand, adds, norms and
/// quantizes, and writes the sum the next residual reads; also with a scale of the sum between
/// the add and the norm (a Gemma 4 layer's output scale), which it applies to the sum it writes.
/// Matches the CPU fused or not.
#[test]
fn post_norm_add_and_pre_norm_fuse() {
    let cols = 256usize;
    let mut rng = Rng(14);
    let mut w = Weights::default();
    let (ta, tb) = (table(&mut w, &mut rng, cols, 3.0), table(&mut w, &mut rng, cols, 2.0));
    let post = w.add(weight("post", GgmlType::F32, cols, 1, &mut rng, 1.0));
    let pre = w.add(weight("pre", GgmlType::F32, cols, 1, &mut rng, 1.0));
    let wm = w.add(weight("m", GgmlType::Q4_K, cols, cols, &mut rng, 0.05));
    for rows in [1usize, 3] {
        // Three such runs: a weighted post-norm (the second operand of its add), a plain one,
        // and a weighted one whose sum is scaled before the norm.
        let g = graph(&w, rows, rows, |g| {
            let (x, r) = (g.embed(ta), g.embed(tb));
            let mut outs = Vec::new();
            for (weight, scale) in [(Some(post), None), (None, None), (Some(post), Some(0.7))] {
                let a = g.rms_norm(x, weight, 1e-6, cols);
                let mut s = g.add(r, a);
                if let Some(f) = scale {
                    s = g.scale(s, f);
                }
                let h = g.rms_norm(s, Some(pre), 1e-6, cols);
                let m = g.linear(h, wm, None);
                outs.push(g.add(m, s));
            }
            let o = g.add(outs[0], outs[1]);
            g.add(o, outs[2])
        });
        for fused in [true, false] {
            let Some(mut p) = Pair::with(&w, &small_kv(), profiled(fused)) else { return };
            let what = format!("{rows} rows fused {fused}");
            p.check(&what, &g, &[Step::simple(tokens(rows, 6), 0, vec![0])], 2e-2, 2e-2);
            let prof = p.vk.profile().expect("profiling on");
            if fused && p.vk.uses_int8() {
                let got = (prof.count("norm_q8"), prof.count("rms_norm"), prof.count("norm_add"), prof.count("scale"));
                assert_eq!(got, (3, 0, 0, 0), "{what}: {:?}", prof.totals.keys());
            }
        }
    }
}

/// A residual add whose sum a decode matmul reads (Gemma 4 E's per-layer input gate after the
/// FFN's post-norm and residual): one `norm_q8` without its final norm norms the operand,
/// adds and quantizes the sum (no `norm_add`, no `quantize_act`), and the next residual reads
/// the sum; matches the CPU fused or not, with the normed operand on either side.
#[test]
fn residual_add_quantizes_its_sum() {
    let cols = 256usize;
    let mut rng = Rng(16);
    let mut w = Weights::default();
    let (ta, tb) = (table(&mut w, &mut rng, cols, 3.0), table(&mut w, &mut rng, cols, 2.0));
    let post = w.add(weight("post", GgmlType::F32, cols, 1, &mut rng, 1.0));
    let wm = w.add(weight("m", GgmlType::Q4_K, cols, 64, &mut rng, 0.05));
    let wp = w.add(weight("p", GgmlType::Q8_0, 64, cols, &mut rng, 0.05));
    for rows in [1usize, 3] {
        for normed_first in [true, false] {
            let g = graph(&w, rows, rows, |g| {
                let (x, r) = (g.embed(ta), g.embed(tb));
                let a = g.rms_norm(x, Some(post), 1e-6, cols);
                let s = if normed_first { g.add(a, r) } else { g.add(r, a) };
                let m = g.linear(s, wm, None);
                let p = g.linear(m, wp, None);
                g.add(p, s)
            });
            for fused in [true, false] {
                let Some(mut p) = Pair::with(&w, &small_kv(), profiled(fused)) else { return };
                let what = format!("{rows} rows, normed first {normed_first}, fused {fused}");
                p.check(&what, &g, &[Step::simple(tokens(rows, 7), 0, vec![0])], 2e-2, 2e-2);
                let prof = p.vk.profile().expect("profiling on");
                if fused && p.vk.uses_int8() {
                    let got = (
                        prof.count("norm_q8"),
                        prof.count("norm_add"),
                        prof.count("quantize_act"),
                        prof.count("rms_norm"),
                    );
                    assert_eq!(got, (1, 0, 1, 0), "{what}: {:?}", prof.totals.keys());
                }
            }
        }
    }
}

/// A gated activation whose up operand is a column slice of a wider tensor (Gemma 4's
/// per-layer input of one layer) and whose output a decode matmul reads: `glu_q8` reads the
/// slice in place (no `slice_cols` dispatch), matching the CPU fused or not.
#[test]
fn glu_reads_a_column_slice_in_place() {
    let mut rng = Rng(15);
    let mut w = Weights::default();
    let (tx, tall) = (table(&mut w, &mut rng, 256, 2.0), table(&mut w, &mut rng, 384, 2.0));
    let w_gate = w.add(weight("gate", GgmlType::Q4_K, 256, 128, &mut rng, 0.05));
    let w_proj = w.add(weight("proj", GgmlType::Q8_0, 128, 256, &mut rng, 0.05));
    for rows in [1usize, 3] {
        let g = graph(&w, rows, rows, |g| {
            let (x, all) = (g.embed(tx), g.embed(tall));
            let gate = g.linear(x, w_gate, None);
            let mine = g.slice_cols(all, 384, 128, 128);
            let u = g.glu(gate, mine, Activation::GeluTanh);
            g.linear(u, w_proj, None)
        });
        check_glu_fused_or_not(&w, &g, rows, &format!("{rows} rows"), "slice_cols");
    }
}

/// Graph `g` over `rows` tokens against the CPU, fused and not; fused on an integer-dot
/// device, no `absent` dispatch may have run (the `glu_q8` took that node in).
fn check_glu_fused_or_not(w: &Weights, g: &infr_core::Graph, rows: usize, what: &str, absent: &str) {
    for fused in [true, false] {
        let Some(mut p) = Pair::with(w, &small_kv(), profiled(fused)) else { return };
        let what = format!("{what}, fused {fused}");
        p.check(&what, g, &[Step::simple(tokens(rows, 8), 0, vec![0])], 2e-2, 2e-2);
        let prof = p.vk.profile().expect("profiling on");
        if fused && p.vk.uses_int8() {
            assert!(!prof.totals.contains_key(absent), "{what}: {:?}", prof.totals.keys());
        }
    }
}

/// A gated activation whose up operand is an RMS norm over groups of columns with a weight
/// of one group (Qwen3.5's gated norm, per head), read by a decode matmul: `glu_q8` applies
/// the norm as it reads (no `rms_norm` dispatch) for groups of 128 and 32, matching the CPU
/// fused or not.
#[test]
fn glu_applies_a_grouped_norm_of_up() {
    let mut rng = Rng(16);
    let mut w = Weights::default();
    let (tx, tu) = (table(&mut w, &mut rng, 256, 2.0), table(&mut w, &mut rng, 512, 2.0));
    let w_gate = w.add(weight("gate", GgmlType::Q4_K, 256, 512, &mut rng, 0.05));
    let w_proj = w.add(weight("proj", GgmlType::Q8_0, 512, 256, &mut rng, 0.05));
    for group in [128usize, 32] {
        let norm = w.add(weight(&format!("norm{group}"), GgmlType::F32, group, 1, &mut rng, 1.0));
        for rows in [1usize, 3] {
            let g = graph(&w, rows, rows, |g| {
                let (x, up) = (g.embed(tx), g.embed(tu));
                let gate = g.linear(x, w_gate, None);
                let up = g.rms_norm(up, Some(norm), 1e-6, group);
                let u = g.glu(gate, up, Activation::Silu);
                g.linear(u, w_proj, None)
            });
            check_glu_fused_or_not(&w, &g, rows, &format!("group {group}, {rows} rows"), "rms_norm");
        }
    }
}

#[test]
fn rope_modes_scaling_and_factors() {
    let mut rng = Rng(13);
    let mut w = Weights::default();
    let t = table(&mut w, &mut rng, 4 * 64, 1.0);
    let ff: Vec<f32> = (0..24).map(|i| 1.0 + i as f32 * 0.25).collect();
    let ffw = w.add(infr_core::WeightData {
        name: "rope_freqs".into(),
        info: infr_core::WeightInfo { ty: GgmlType::F32, dims: vec![24] },
        bytes: infr_gguf::TensorData::from_vec(bytemuck::cast_slice(&ff).to_vec()),
    });
    let Some(mut p) = Pair::new(&w, &small_kv()) else { return };
    let yarn =
        RopeScaling::Yarn { ext_factor: 1.0, attn_factor: 1.0, beta_fast: 32.0, beta_slow: 1.0, n_ctx_orig: 4096 };
    for mode in [RopeMode::Normal, RopeMode::Neox] {
        for (n_rot, scaling, freq_scale, factors) in
            [(64, RopeScaling::None, 1.0, None), (48, RopeScaling::None, 0.5, Some(ffw)), (64, yarn, 0.25, None)]
        {
            let params = RopeParams {
                mode,
                head_dim: 64,
                n_rot,
                freq_base: 10000.0,
                freq_scale,
                scaling,
                freq_factors: factors,
            };
            let g = graph(&w, 4, 4, |g| {
                let x = g.embed(t);
                g.rope(x, params)
            });
            let steps = [Step::simple(tokens(4, 3), 0, vec![0]), Step::simple(tokens(4, 5), 4093, vec![0; 257])];
            // Frequency factors divide the angle (`theta / ff`, as ggml does). Vulkan lets f32
            // division be off by 2.5 ulp and NVIDIA's is (1.2e-4 here at position ~4096, where
            // an ulp of the angle is 2.4e-4 rad); lavapipe divides exactly.
            let tol = if factors.is_some() { 2e-4 } else { 2e-5 };
            p.check(&format!("rope {mode:?} n_rot={n_rot} {scaling:?}"), &g, &steps, tol, tol);
        }
    }
}

#[test]
fn output_rows_gather() {
    let mut rng = Rng(14);
    let mut w = Weights::default();
    let t = table(&mut w, &mut rng, 40, 1.0);
    let Some(mut p) = Pair::new(&w, &small_kv()) else { return };
    let g = graph(&w, 5, 2, |g| {
        let x = g.embed(t);
        g.output_rows(x)
    });
    let mut s = Step::simple(tokens(5, 4), 0, vec![0]);
    s.output_rows = vec![4, 1];
    p.check("output_rows", &g, &[s], 0.0, 0.0);
}

/// Llama 4's attention temperature: rows scaled by a factor of their position (a floor
/// scale of 3 makes the factor change within a short step).
#[test]
fn temp_scale_by_position() {
    let mut rng = Rng(17);
    let mut w = Weights::default();
    let t = table(&mut w, &mut rng, 64, 1.0);
    let Some(mut p) = Pair::new(&w, &small_kv()) else { return };
    let params = infr_core::TempScaleParams { floor_scale: 3, scale: 0.1, offset: 1.0 };
    let g = graph(&w, 9, 9, |g| {
        let x = g.embed(t);
        g.temp_scale(x, params)
    });
    p.check("temp_scale", &g, &[Step::simple(tokens(9, 4), 2, vec![0, 1])], 1e-6, 1e-6);
}

#[test]
fn kv_page_copy() {
    let mut rng = Rng(16);
    let mut w = Weights::default();
    let (tq, tk, tv) =
        (table(&mut w, &mut rng, 32, 1.0), table(&mut w, &mut rng, 32, 1.0), table(&mut w, &mut rng, 32, 1.0));
    let kv = kv_spec(1, 1, 32, 32, 6, 4, KvDType::F16);
    let Some(mut p) = Pair::new(&w, &kv) else { return };
    let params = |write_kv| AttnParams { scale: 0.2, write_kv, ..attn_params(1, 1, 32, None, None) };
    let build = |n, write| {
        graph(&w, n, n, |g| {
            let (q, k, v) = embed_qkv(g, tq, tk, tv);
            g.attention(q, k, v, params(write))
        })
    };
    p.check("fill", &build(8, true), &[Step::simple(tokens(8, 2), 0, vec![1, 3])], 2e-3, 2e-3);
    p.vk.copy_kv_pages(&[(1, 4), (3, 5)]).unwrap();
    p.cpu.copy_kv_pages(&[(1, 4), (3, 5)]).unwrap();
    // Read the copied prefix through the new pages without writing.
    p.check("copied", &build(1, false), &[Step::simple(vec![3], 7, vec![4, 5])], 2e-3, 2e-3);
    assert!(p.vk.copy_kv_pages(&[(0, 6)]).is_err());
}

/// Three projections of one normed row (weights of three types, so no fused dispatch takes
/// them together) read the same input and write disjoint outputs: the plan records them
/// with no barrier between them, and the sum still matches the CPU, over several steps.
#[test]
fn independent_dispatches_share_a_level() {
    let cols = 256usize;
    let mut rng = Rng(15);
    let mut w = Weights::default();
    let t = table(&mut w, &mut rng, cols, 2.0);
    let nw = w.add(weight("nw", GgmlType::F32, cols, 1, &mut rng, 1.0));
    let ws: Vec<WeightId> = [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::F16]
        .iter()
        .enumerate()
        .map(|(i, &ty)| w.add(weight(&format!("w{i}"), ty, cols, 64, &mut rng, 0.5)))
        .collect();
    let g = graph(&w, 3, 3, |g| {
        let x = g.embed(t);
        let n = g.rms_norm(x, Some(nw), 1e-6, cols);
        let p: Vec<TensorId> = ws.iter().map(|&wi| g.linear(n, wi, None)).collect();
        let s = g.add(p[0], p[1]);
        g.add(s, p[2])
    });
    let Some(mut p) = Pair::new(&w, &small_kv()) else { return };
    let steps = [Step::simple(tokens(3, 5), 0, vec![0]), Step::simple(tokens(3, 9), 3, vec![0])];
    p.check("three projections", &g, &steps, 1e-3, 1e-3);
    let id = p.vk.compile(&g).unwrap();
    let (dispatches, barriers) = p.vk.plan_barriers(id).expect("plan compiled");
    assert!(
        barriers + 2 <= dispatches,
        "{dispatches} dispatches, {barriers} barriers: the projections did not share a level"
    );
    // Under profiling each dispatch is timed alone.
    let Some(mut q) = Pair::with(&w, &small_kv(), profiled(true)) else { return };
    q.check("three projections, profiled", &g, &steps, 1e-3, 1e-3);
    let id = q.vk.compile(&g).unwrap();
    let (dispatches, barriers) = q.vk.plan_barriers(id).expect("plan compiled");
    assert_eq!(barriers, dispatches);
}
