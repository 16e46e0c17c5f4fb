//! Parity of attention against the CPU reference backend: prefill and decode kernels, key
//! splits, caches of every type, windows, chunks, sinks, canvases and the fused inputs.

use infr_core::{AttnParams, KvDType, RopeMode, RopeParams, RopeScaling, WeightId};
use infr_quant::GgmlType;

use crate::common::*;
use crate::ops::{embed_qkv, qkv_tables, table, tokens, VOCAB};

struct AttnCase {
    name: &'static str,
    nh: u32,
    nkv: u32,
    dk: u32,
    dv: u32,
    window: Option<u32>,
    chunk: Option<u32>,
    softcap: Option<f32>,
    dtype: KvDType,
}

/// Bidirectional steps (a diffusion canvas): after a causal prefill of 5 tokens, canvases of
/// 6 rows at positions 5..11 see every row of the canvas and the cached keys of the first row's
/// window, against the CPU; with a window, and with enough heads and keys for split rows.
#[test]
fn attention_bidirectional_canvas() {
    for (name, window, dtype) in
        [("full", None, KvDType::F32), ("window 3", Some(3), KvDType::F16), ("window 8", Some(8), KvDType::F32)]
    {
        let (nh, nkv, d) = (4u32, 2u32, 32u32);
        let mut rng = Rng(31);
        let mut w = Weights::default();
        let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, d, d);
        let kv = kv_spec(1, nkv, d, d, 8, 4, dtype);
        let Some(mut p) = Pair::new(&w, &kv) else { return };
        let params = |bidirectional: bool| AttnParams { bidirectional, ..attn_params(nh, nkv, d, None, window) };
        let build = |n: usize, bidir: bool| {
            graph(&w, n, n, |g| {
                let (q, k, v) = embed_qkv(g, tq, tk, tv);
                g.attention(q, k, v, params(bidir))
            })
        };
        let pages = vec![5u32, 1, 6, 0];
        let tol = if dtype == KvDType::F16 { 2e-3 } else { 1e-4 };
        p.check(
            &format!("{name} prefill"),
            &build(5, false),
            &[Step::simple(tokens(5, 3), 0, pages.clone())],
            tol,
            tol,
        );
        // Two canvases at the same positions (the second overwrites the first's K/V).
        let canvases = [Step::simple(tokens(6, 7), 5, pages.clone()), Step::simple(tokens(6, 9), 5, pages.clone())];
        p.check(&format!("{name} canvas"), &build(6, true), &canvases, tol, tol);
    }
}

/// A canvas long enough for the cooperative-matrix attention (40 rows x 4 heads: one key
/// split): after a causal prefill of 20 tokens, two canvases at positions 20..60 that see
/// every row of the canvas, with and without a window, against the CPU (the scalar kernel
/// where there are no cooperative matrices).
#[test]
fn attention_bidirectional_canvas_blocks() {
    for (window, d) in [(None, 64u32), (Some(37), 128)] {
        let (nh, nkv) = (4u32, 2u32);
        let mut rng = Rng(33);
        let mut w = Weights::default();
        let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, d, d);
        let kv = kv_spec(1, nkv, d, d, 8, 16, KvDType::F16);
        let Some(mut p) = Pair::new(&w, &kv) else { return };
        let params = |bidirectional: bool| AttnParams { bidirectional, ..attn_params(nh, nkv, d, None, window) };
        let build = |n: usize, bidir: bool| {
            graph(&w, n, n, |g| {
                let (q, k, v) = embed_qkv(g, tq, tk, tv);
                g.attention(q, k, v, params(bidir))
            })
        };
        let pages = vec![6u32, 2, 7, 0];
        let name = format!("canvas blocks window {window:?} d {d}");
        p.check(
            &format!("{name} prefill"),
            &build(20, false),
            &[Step::simple(tokens(20, 3), 0, pages.clone())],
            2e-3,
            2e-3,
        );
        let canvases = [Step::simple(tokens(40, 7), 20, pages.clone()), Step::simple(tokens(40, 9), 20, pages.clone())];
        p.check(&format!("{name} canvas"), &build(40, true), &canvases, 2e-3, 2e-3);
    }
}

fn attention_case(c: &AttnCase) {
    let mut rng = Rng(15);
    let mut w = Weights::default();
    let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, c.nh, c.nkv, c.dk, c.dv);
    let page_size = 4;
    let kv = kv_spec(2, c.nkv, c.dk, c.dv, 12, page_size, c.dtype);
    let Some(mut p) = Pair::new(&w, &kv) else { return };
    let params = |layer: u32, write_kv: bool| AttnParams {
        kv_layer: layer,
        n_head: c.nh,
        n_kv_head: c.nkv,
        head_dim_k: c.dk,
        head_dim_v: c.dv,
        scale: 1.0 / (c.dk as f32).sqrt(),
        softcap: c.softcap,
        window: c.window,
        chunk: c.chunk,
        sinks: None,
        write_kv,
        bidirectional: false,
    };
    let build = |n: usize| {
        graph(&w, n, n, |g| {
            let (q, k, v) = embed_qkv(g, tq, tk, tv);
            let a = g.attention(q, k, v, params(0, true));
            // A KV-sharing layer reads layer 0 without writing; layer 1 is written and read.
            let b = g.attention(q, k, v, params(0, false));
            let s = g.add(a, b);
            let c2 = g.attention(q, k, v, params(1, true));
            g.add(s, c2)
        })
    };
    // Sequence A on pages [7, 2, 9]; B on [4, 11]. Prefill A (6 tokens), then a mixed step with
    // one decode token of A and a 3-token prefill of B, then decode steps.
    let pa = vec![7u32, 2, 9];
    let pb = vec![4u32, 11];
    let prefill = Step::simple(tokens(6, 1), 0, pa.clone());
    let mixed = Step {
        tokens: vec![3, 8, 1, 12],
        positions: vec![6, 0, 1, 2],
        token_seq: vec![0, 1, 1, 1],
        seqs: vec![pa.clone(), pb.clone()],
        output_rows: vec![0, 1, 2, 3],
        embed_mix: Vec::new(),
        hidden: Vec::new(),
    };
    let decode = |t: u32, pos_a: u32, pos_b: u32| Step {
        tokens: vec![t, t + 1],
        positions: vec![pos_a, pos_b],
        token_seq: vec![0, 1],
        seqs: vec![pa.clone(), pb.clone()],
        output_rows: vec![0, 1],
        embed_mix: Vec::new(),
        hidden: Vec::new(),
    };
    let tol = if c.dtype == KvDType::F16 { 2e-3 } else { 1e-4 };
    p.check(&format!("{} prefill", c.name), &build(6), &[prefill], tol, tol);
    p.check(&format!("{} mixed", c.name), &build(4), &[mixed], tol, tol);
    p.check(&format!("{} decode", c.name), &build(2), &[decode(5, 7, 3), decode(9, 8, 4), decode(2, 9, 5)], tol, tol);
}

#[test]
fn attention_gqa_f16() {
    attention_case(&AttnCase {
        name: "gqa f16",
        nh: 4,
        nkv: 2,
        dk: 64,
        dv: 64,
        window: None,
        chunk: None,
        softcap: None,
        dtype: KvDType::F16,
    });
}

#[test]
fn attention_f32_cache_mixed_head_dims() {
    attention_case(&AttnCase {
        name: "f32 dk!=dv",
        nh: 2,
        nkv: 1,
        dk: 32,
        dv: 80,
        window: None,
        chunk: None,
        softcap: None,
        dtype: KvDType::F32,
    });
}

/// A q8_0 cache: blocks written on the device, read back by the attention kernel, the query
/// rounded through q8_0, as the CPU backend does (which matches llama.cpp's q8_0 runs).
#[test]
fn attention_q8_0_cache() {
    attention_case(&AttnCase {
        name: "q8_0 gqa",
        nh: 4,
        nkv: 2,
        dk: 64,
        dv: 32,
        window: Some(5),
        chunk: None,
        softcap: None,
        dtype: KvDType::Q8_0,
    });
}

#[test]
fn attention_window_and_softcap() {
    attention_case(&AttnCase {
        name: "window softcap",
        nh: 2,
        nkv: 2,
        dk: 16,
        dv: 16,
        window: Some(3),
        chunk: None,
        softcap: Some(5.0),
        dtype: KvDType::F16,
    });
}

/// Llama 4's chunked attention: positions 0-2, 3-5, 6-8… see only their own chunk (the
/// decode steps cross chunk boundaries).
#[test]
fn attention_chunked() {
    attention_case(&AttnCase {
        name: "chunked",
        nh: 4,
        nkv: 2,
        dk: 32,
        dv: 32,
        window: None,
        chunk: Some(3),
        softcap: None,
        dtype: KvDType::F16,
    });
}

/// A long prefill (one key split per workgroup) followed by split decode steps over a long
/// context (many keys per split, partials merged).
#[test]
fn attention_long_context_splits() {
    long_context_splits(0, false);
}

/// gpt-oss attention sinks with decode split over many workgroups (the sink enters one split
/// and the merge) and with the prefill kernels.
#[test]
fn attention_sinks_long_context() {
    long_context_splits(0, true);
}

/// [`attention_long_context_splits`] with decode capped at two key splits
/// (`kernels.vulkan.flash_splits = 2`).
#[test]
fn attention_long_context_capped_splits() {
    long_context_splits(2, false);
}

/// [`attention_long_context_splits`] with more key splits than the automatic 32
/// (`kernels.vulkan.flash_splits = 40`; the 256-key context keeps 4 of them busy).
#[test]
fn attention_long_context_more_splits() {
    long_context_splits(40, false);
}

/// Decode attention by lane groups (`attention_decode.wgsl`, `INFR_VK_ATTN_LANES=1`): groups
/// of 4 with sinks over automatic splits and over two long splits, 2 with a softcap and a
/// sliding window over two splits, 8 in one split (the two-pass rows with f16 probabilities,
/// scores past the kept ones computed again), 8 of dim 128 and 2 of dim 256 (on devices with
/// 32-lane subgroups; the per-head kernel on lavapipe's 8), one head per KV head of dim 64,
/// each into an int8 matmul too (the merge that quantizes).
#[test]
fn attention_lane_groups() {
    let lanes = |heads, dim, splits, sinks, softcap, window| LongContext {
        heads,
        dim,
        splits,
        sinks,
        softcap,
        window,
        lanes: Some(true),
    };
    long_context(lanes((4, 1), 32, 0, true, None, None));
    // Two splits of 128 keys: each key group takes several runs of keys (the rescaling).
    long_context(lanes((4, 1), 32, 2, false, None, None));
    long_context(lanes((8, 4), 32, 2, false, Some(20.0), Some(100)));
    long_context(lanes((8, 1), 32, 1, false, None, None));
    // Real head dims: 8 heads of 128 over several splits, 2 of 256, 64 without grouping.
    long_context(lanes((8, 1), 128, 3, false, None, None));
    long_context(lanes((4, 2), 256, 0, false, None, None));
    long_context(lanes((2, 2), 64, 0, true, None, None));
}

fn long_context_splits(splits: u32, with_sinks: bool) {
    // The per-head kernel (the lane-group one has its own test).
    let case = LongContext {
        heads: (4, 1),
        dim: 32,
        splits,
        sinks: with_sinks,
        softcap: None,
        window: None,
        lanes: Some(false),
    };
    long_context(case);
}

/// A case of [`long_context`]: query and KV heads, head dim, decode key splits
/// (`kernels.vulkan.flash_splits`), sinks, softcap, window, decode attention by lane groups.
struct LongContext {
    heads: (u32, u32),
    dim: u32,
    splits: u32,
    sinks: bool,
    softcap: Option<f32>,
    window: Option<u32>,
    lanes: Option<bool>,
}

fn long_context(case: LongContext) {
    let LongContext { heads: (nh, nkv), dim: d, splits, sinks: with_sinks, softcap, window, lanes } = case;
    let mut rng = Rng(17);
    let mut w = Weights::default();
    let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, d, d);
    let wo = w.add(weight("o", GgmlType::Q8_0, (nh * d) as usize, 64, &mut rng, 0.3));
    let sinks = with_sinks.then(|| w.add(weight("sinks", GgmlType::F32, nh as usize, 1, &mut rng, 3.0)));
    let kv = kv_spec(1, nkv, d, d, 40, 8, KvDType::F16);
    let opts = infr_vulkan::VulkanOptions {
        validation: true,
        attention_splits: splits,
        lane_attention: lanes,
        ..Default::default()
    };
    let Some(mut p) = Pair::with(&w, &kv, opts) else { return };
    let params = AttnParams { scale: 0.3, sinks, ..attn_params(nh, nkv, d, softcap, window) };
    let build = |n: usize| {
        graph(&w, n, n, |g| {
            let (q, k, v) = embed_qkv(g, tq, tk, tv);
            g.attention(q, k, v, params)
        })
    };
    let pages: Vec<u32> = (0..40).rev().collect();
    let steps: Vec<Step> = (0..4).map(|i| Step::simple(tokens(64, i), 64 * i, pages.clone())).collect();
    p.check("long prefill", &build(64), &steps, 2e-3, 2e-3);
    let dec: Vec<Step> = (0..3).map(|i| Step::simple(vec![i + 1], 256 + i, pages.clone())).collect();
    p.check("long decode", &build(1), &dec, 2e-3, 2e-3);
    // The merged output feeding an int8 matmul: merge and quantization are one dispatch
    // (`attention_combine_q8`) where the device has the integer-dot kernels.
    let proj = build_proj(&w, tq, tk, tv, wo, params);
    p.check("long decode into a matmul", &proj, &dec, 2e-2, 2e-2);
}

/// Prefill rows in one key split with an f16 cache take two passes (probabilities rounded to
/// f16 as llama.cpp's CPU rounds them); the second reads the first pass's scores of the first
/// four tiles of keys and computes the later ones again: rows of up to 384 keys (six tiles).
#[test]
fn attention_exact_rows_past_the_kept_scores() {
    let mut rng = Rng(23);
    let mut w = Weights::default();
    let (nh, nkv, d) = (4u32, 1u32, 32u32);
    let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, d, d);
    let kv = kv_spec(1, nkv, d, d, 48, 8, KvDType::F16);
    let opts = infr_vulkan::VulkanOptions { validation: true, ..Default::default() };
    let Some(mut p) = Pair::with(&w, &kv, opts) else { return };
    let params = attn_params(nh, nkv, d, None, None);
    let g = graph(&w, 64, 64, |g| {
        let (q, k, v) = embed_qkv(g, tq, tk, tv);
        g.attention(q, k, v, params)
    });
    let pages: Vec<u32> = (0..48).collect();
    let steps: Vec<Step> = (0..6).map(|i| Step::simple(tokens(64, i + 3), 64 * i, pages.clone())).collect();
    p.check("prefill past the kept scores", &g, &steps, 2e-3, 2e-3);
}

fn build_proj(
    w: &Weights,
    tq: WeightId,
    tk: WeightId,
    tv: WeightId,
    wo: WeightId,
    params: AttnParams,
) -> infr_core::Graph {
    graph(w, 1, 1, |g| {
        let (q, k, v) = embed_qkv(g, tq, tk, tv);
        let a = g.attention(q, k, v, params);
        g.linear(a, wo, None)
    })
}

/// Q/K per-head norms, RoPE and the KV append feeding attention, which the Vulkan backend
/// runs as one fused dispatch (`qk_rope`): both RoPE modes, partial rotation, YaRN and
/// frequency factors, norms with and without weights, a per-head norm of V (Gemma 4's,
/// applied as V is appended), f16 and f32 caches, head dims of 64 and 256, and an attention
/// that reads the cache without writing it. No norm runs on its own.
#[test]
fn attention_with_fused_rope_inputs() {
    let yarn =
        RopeScaling::Yarn { ext_factor: 1.0, attn_factor: 1.0, beta_fast: 32.0, beta_slow: 1.0, n_ctx_orig: 4096 };
    let cases = [
        (RopeMode::Neox, 64, 64, RopeScaling::None, false, KvDType::F16),
        (RopeMode::Normal, 64, 48, yarn, true, KvDType::F32),
        (RopeMode::Neox, 256, 256, RopeScaling::None, false, KvDType::F16),
    ];
    for (ci, &(mode, hd, n_rot, scaling, factors, dtype)) in cases.iter().enumerate() {
        let (nh, nkv) = (4u32, 2u32);
        let mut rng = Rng(30 + ci as u64);
        let mut w = Weights::default();
        let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, hd, hd);
        let vec_weight = |w: &mut Weights, name: &str, v: Vec<f32>| {
            let n = v.len();
            w.add(infr_core::WeightData {
                name: name.into(),
                info: infr_core::WeightInfo { ty: GgmlType::F32, dims: vec![n] },
                bytes: infr_gguf::TensorData::from_vec(bytemuck::cast_slice(&v).to_vec()),
            })
        };
        let qn = vec_weight(&mut w, "q_norm", (0..hd).map(|_| 1.0 + 0.3 * rng.f()).collect());
        let ff =
            factors.then(|| vec_weight(&mut w, "rope_freqs", (0..n_rot / 2).map(|i| 1.0 + i as f32 * 0.2).collect()));
        let rope =
            RopeParams { mode, head_dim: hd, n_rot, freq_base: 10000.0, freq_scale: 0.5, scaling, freq_factors: ff };
        let page_size = 16;
        let kv = kv_spec(2, nkv, hd, hd, 300, page_size, dtype);
        let Some(mut p) = Pair::with(&w, &kv, profiled(true)) else { return };
        let params = |layer: u32, write_kv: bool| AttnParams {
            kv_layer: layer,
            write_kv,
            ..attn_params(nh, nkv, hd, None, None)
        };
        let build = |n: usize| {
            graph(&w, n, n, |g| {
                let (q, k, v) = (g.embed(tq), g.embed(tk), g.embed(tv));
                // Layer 0: weighted q norm, unweighted k and v norms.
                let qr = g.rms_norm(q, Some(qn), 1e-6, hd as usize);
                let kr = g.rms_norm(k, None, 1e-5, hd as usize);
                let vr = g.rms_norm(v, None, 1e-6, hd as usize);
                let (qr, kr) = (g.rope(qr, rope), g.rope(kr, rope));
                let a = g.attention(qr, kr, vr, params(0, true));
                // Layer 1: RoPE without norms; then a reader of layer 1 that does not write.
                let (q2, k2) = (g.rope(q, rope), g.rope(k, rope));
                let b = g.attention(q2, k2, v, params(1, true));
                let (q3, k3) = (g.rope(q, rope), g.rope(k, rope));
                let c = g.attention(q3, k3, v, params(1, false));
                let s = g.add(a, b);
                g.add(s, c)
            })
        };
        let pages: Vec<u32> = (0..300).rev().collect();
        let prefill = Step::simple(tokens(5, 1), 0, pages.clone());
        let far = Step::simple(tokens(2, 7), 4090, pages.clone());
        let tol = if dtype == KvDType::F16 { 3e-3 } else { 3e-4 };
        p.check(&format!("fused rope case {ci} prefill"), &build(5), &[prefill], tol, tol);
        p.check(&format!("fused rope case {ci} far decode"), &build(2), &[far], tol, tol);
        let prof = p.vk.profile().expect("profiling on");
        let fused = prof.totals.contains_key("qk_rope.f16") || prof.totals.contains_key("qk_rope.f32");
        if fused {
            assert!(!prof.totals.contains_key("rms_norm"), "case {ci}: {:?}", prof.totals.keys());
        }
    }
}

/// Qwen3.5's output-gated attention: one projection holds each head's query and gate
/// (periods of `2 * head_dim` columns), sliced apart, the query normed and rotated, the gate's
/// sigmoid multiplying the attention output that an int8 matmul reads. Fused, `qk_rope` reads
/// the query and `glu_q8` the gate in place (no `slice_cols` dispatch); matches the CPU fused
/// or not, in prefill and decode.
#[test]
fn gated_attention_reads_query_and_gate_in_place() {
    let (nh, nkv, hd) = (4u32, 2u32, 64u32);
    let d = hd as usize;
    let mut rng = Rng(61);
    let mut w = Weights::default();
    let tqg = table(&mut w, &mut rng, 2 * nh as usize * d, 1.0);
    let (_, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, hd, hd);
    let qn = w.add(weight("q_norm", GgmlType::F32, d, 1, &mut rng, 1.0));
    let wo = w.add(weight("wo", GgmlType::Q8_0, nh as usize * d, 96, &mut rng, 0.05));
    let rope = neox_rope(hd);
    let build = |n: usize| {
        graph(&w, n, n, |g| {
            let qg = g.embed(tqg);
            let q = g.slice_cols(qg, 2 * d, 0, d);
            let gate = g.slice_cols(qg, 2 * d, d, d);
            let q = g.rms_norm(q, Some(qn), 1e-6, d);
            let (k, v) = (g.embed(tk), g.embed(tv));
            let (q, k) = (g.rope(q, rope), g.rope(k, rope));
            let a = g.attention(q, k, v, attn_params(nh, nkv, hd, None, None));
            let a = g.glu(gate, a, infr_core::Activation::Sigmoid);
            g.linear(a, wo, None)
        })
    };
    for fused in [true, false] {
        let kv = kv_spec(1, nkv, hd, hd, 64, 16, KvDType::F16);
        let Some(mut p) = Pair::with(&w, &kv, profiled(fused)) else { return };
        let pages: Vec<u32> = (0..64).collect();
        let steps = [(5, 0, 1), (1, 5, 2), (2, 6, 3)];
        for (n, pos, salt) in steps {
            let step = Step::simple(tokens(n, salt), pos, pages.clone());
            p.check(&format!("gated attention fused {fused} n={n}"), &build(n), &[step], 3e-2, 3e-2);
        }
        let prof = p.vk.profile().expect("profiling on");
        if fused && p.vk.uses_int8() && prof.totals.keys().any(|k| k.starts_with("qk_rope")) {
            assert!(!prof.totals.contains_key("slice_cols"), "{:?}", prof.totals.keys());
        }
    }
}

/// Q, K and V from split-K products (steps of 10-64 tokens on devices with cooperative
/// matrices): the fused norm + RoPE + KV-append dispatch adds up their partial planes itself;
/// with a q8_0 cache, whose append runs after it, V's planes are summed by a reduction first.
/// Matches the CPU, fused and unfused, f16 and q8_0 caches.
#[test]
fn attention_inputs_sum_split_k_planes() {
    let (dim, nh, nkv, hd) = (1024usize, 4u32, 2u32, 64u32);
    let mut rng = Rng(61);
    let mut w = Weights::default();
    let tx = table(&mut w, &mut rng, dim, 1.0);
    let wq = w.add(weight("q", GgmlType::Q4_K, dim, (nh * hd) as usize, &mut rng, 0.05));
    let wk = w.add(weight("k", GgmlType::Q4_K, dim, (nkv * hd) as usize, &mut rng, 0.05));
    let wv = w.add(weight("v", GgmlType::Q6_K, dim, (nkv * hd) as usize, &mut rng, 0.05));
    let wo = w.add(weight("o", GgmlType::Q4_K, (nh * hd) as usize, 256, &mut rng, 0.05));
    let rope = neox_rope(hd);
    let params = attn_params(nh, nkv, hd, None, None);
    let build = |n: usize| {
        graph(&w, n, n, |g| {
            let x = g.embed(tx);
            let h = g.rms_norm(x, None, 1e-6, dim);
            let (q, k, v) = (g.linear(h, wq, None), g.linear(h, wk, None), g.linear(h, wv, None));
            let q = g.rms_norm(q, None, 1e-6, hd as usize);
            let (q, k) = (g.rope(q, rope), g.rope(k, rope));
            let a = g.attention(q, k, v, params);
            g.linear(a, wo, None)
        })
    };
    for dtype in [KvDType::F16, KvDType::Q8_0] {
        for fused in [true, false] {
            let opts = profiled(fused);
            let kv = kv_spec(1, nkv, hd, hd, 8, 16, dtype);
            let Some(mut p) = Pair::with(&w, &kv, opts) else { return };
            let pages: Vec<u32> = (0..8).rev().collect();
            let first = Step::simple(tokens(24, 3), 0, pages.clone());
            let next = Step::simple(tokens(20, 5), 24, pages);
            let tol = if dtype == KvDType::F16 { 2e-2 } else { 5e-2 };
            p.check(&format!("split-k attention inputs {dtype:?} fused {fused}"), &build(24), &[first], tol, tol);
            p.check(&format!("split-k attention inputs {dtype:?} fused {fused}, next"), &build(20), &[next], tol, tol);
            if !p.vk.uses_coopmat() {
                return;
            }
            let prof = p.vk.profile().expect("profiling on");
            let reductions = prof.count("split_reduce");
            let kernels: Vec<&String> = prof.totals.keys().collect();
            // Per step: q, k and v split four ways (o, 256 deep, is one range); fused, only
            // V's reduction remains, for the q8_0 cache.
            let want = match (fused, dtype) {
                (false, _) => 3,
                (true, KvDType::Q8_0) => 1,
                (true, _) => 0,
            };
            assert_eq!(reductions, 2 * want, "{dtype:?} fused {fused}: {kernels:?}");
        }
    }
}

/// Prefill chunks as the cooperative-matrix attention takes them (blocks of 64 query rows)
/// on devices that have cooperative matrices: head dims 128 and 64 with GQA, a step whose
/// first block mixes two sequences (the rows of the second are left to the scalar kernel),
/// a chunk continuing the first sequence, a step whose first row is a lone decode row (its
/// block goes to the scalar kernel whole), and a window with a soft cap.
#[test]
fn attention_prefill_blocks() {
    prefill_blocks(false);
}

/// [`attention_prefill_blocks`] with the scalar attention only (cooperative matrices off).
#[test]
fn attention_prefill_blocks_scalar() {
    prefill_blocks(true);
}

/// Scores that rise steeply along the keys (each 32-key tile's largest score ~14 above the
/// previous tile's), so that the cooperative kernel's lazy softmax offset moves on nearly
/// every tile and the outputs accumulated so far are rescaled: queries all `a`, the keys of
/// token t all `b·t`, tokens rising every 5 positions.
#[test]
fn attention_prefill_rising_scores() {
    let mut rng = Rng(23);
    let (nh, nkv, d) = (4u32, 2u32, 128u32);
    let f32_table = |name: &str, cols: usize, value: &dyn Fn(usize) -> f32| {
        let v: Vec<f32> = (0..cols * VOCAB).map(|i| value(i / cols)).collect();
        infr_core::WeightData {
            name: name.into(),
            info: infr_core::WeightInfo { ty: GgmlType::F32, dims: vec![cols, VOCAB] },
            bytes: infr_gguf::TensorData::from_vec(bytemuck::cast_slice(&v).to_vec()),
        }
    };
    let mut w = Weights::default();
    let tq = w.add(f32_table("q", (nh * d) as usize, &|_| 0.4));
    let tk = w.add(f32_table("k", (nkv * d) as usize, &|t| 0.5 * t as f32));
    let tv = table(&mut w, &mut rng, (nkv * d) as usize, 1.0);
    let kv = kv_spec(1, nkv, d, d, 16, 16, KvDType::F16);
    let opts = infr_vulkan::VulkanOptions { validation: true, ..Default::default() };
    let Some(mut p) = Pair::with(&w, &kv, opts) else { return };
    let params = attn_params(nh, nkv, d, None, None);
    let n = 80u32;
    let g = graph(&w, n as usize, n as usize, |g| {
        let (q, k, v) = embed_qkv(g, tq, tk, tv);
        g.attention(q, k, v, params)
    });
    let step = Step::simple((0..n).map(|i| i / 5).collect(), 0, vec![9, 3, 14, 0, 7, 11]);
    p.check("prefill rising scores", &g, &[step], 2e-3, 2e-3);
}

/// Attention of layer 0 over `nh` query heads and `nkv` KV heads of dim `d`, writing the KV.
/// Plain NeoX RoPE over whole heads of `hd`.
fn neox_rope(hd: u32) -> RopeParams {
    RopeParams {
        mode: RopeMode::Neox,
        head_dim: hd,
        n_rot: hd,
        freq_base: 10000.0,
        freq_scale: 1.0,
        scaling: RopeScaling::None,
        freq_factors: None,
    }
}

pub(crate) fn attn_params(nh: u32, nkv: u32, d: u32, softcap: Option<f32>, window: Option<u32>) -> AttnParams {
    attn_params_chunked(nh, nkv, d, softcap, window, None)
}

/// [`attn_params`] with chunked attention.
fn attn_params_chunked(
    nh: u32,
    nkv: u32,
    d: u32,
    softcap: Option<f32>,
    window: Option<u32>,
    chunk: Option<u32>,
) -> AttnParams {
    AttnParams {
        kv_layer: 0,
        n_head: nh,
        n_kv_head: nkv,
        head_dim_k: d,
        head_dim_v: d,
        scale: 1.0 / (d as f32).sqrt(),
        softcap,
        window,
        chunk,
        sinks: None,
        write_kv: true,
        bidirectional: false,
    }
}

/// Tolerance of the cooperative attention over a q8_0 cache against the CPU's q8_0 dot
/// products (queries rounded to f16, not to q8_0 blocks).
const Q8_COOP_TOL: f32 = 5e-3;

fn prefill_blocks(disable_coopmat: bool) {
    let f16 = KvDType::F16;
    let cases = [
        (None, None, None, 128u32, false, f16),
        (Some(37), None, Some(20.0), 128, false, f16),
        (None, None, Some(30.0), 64, false, f16),
        // Chunks of 23 positions: blocks of queries straddle chunk boundaries.
        (None, Some(23), None, 64, false, f16),
        // gpt-oss: a sliding window with per-head sinks.
        (Some(19), None, None, 64, true, f16),
        // A q8_0 cache: the cooperative kernel dequantizes its blocks to f16 (the CPU
        // multiplies q8_0 queries by them), so it matches to within q8_0's rounding.
        (None, None, None, 128, false, KvDType::Q8_0),
        (Some(37), None, None, 64, true, KvDType::Q8_0),
    ];
    for (window, chunk, softcap, d, with_sinks, dtype) in cases {
        let mut rng = Rng(18);
        let mut w = Weights::default();
        let (nh, nkv) = (4u32, 2u32);
        let (tq, tk, tv) = qkv_tables(&mut w, &mut rng, nh, nkv, d, d);
        let sinks = with_sinks.then(|| w.add(weight("sinks", GgmlType::F32, nh as usize, 1, &mut rng, 3.0)));
        let kv = kv_spec(1, nkv, d, d, 16, 16, dtype);
        let opts = infr_vulkan::VulkanOptions { validation: true, disable_coopmat, ..Default::default() };
        let Some(mut p) = Pair::with(&w, &kv, opts) else { return };
        let params = AttnParams { sinks, ..attn_params_chunked(nh, nkv, d, softcap, window, chunk) };
        let build = |n: usize| {
            graph(&w, n, n, |g| {
                let (q, k, v) = embed_qkv(g, tq, tk, tv);
                g.attention(q, k, v, params)
            })
        };
        let (pa, pb) = (vec![9u32, 3, 14, 0, 7, 11], vec![5u32, 12, 1]);
        let (na, nb) = (50u32, 20u32);
        let mixed = Step {
            tokens: (0..na + nb).map(|i| (i * 7 + 1) % VOCAB as u32).collect(),
            positions: (0..na).chain(0..nb).collect(),
            token_seq: (0..na + nb).map(|i| (i >= na) as u32).collect(),
            seqs: vec![pa.clone(), pb.clone()],
            output_rows: (0..na + nb).collect(),
            embed_mix: Vec::new(),
            hidden: Vec::new(),
        };
        let tol = if dtype == KvDType::Q8_0 && !disable_coopmat { Q8_COOP_TOL } else { 2e-3 };
        let name = format!("prefill {dtype:?} window {window:?} chunk {chunk:?} d {d}");
        p.check(&format!("{name} mixed"), &build((na + nb) as usize), &[mixed], tol, tol);
        // 40 tokens x 4 heads = 160 rows: one key split, so the cooperative kernel runs.
        let more = Step::simple(tokens(40, 3), na, pa.clone());
        p.check(&format!("{name} continued"), &build(40), &[more], tol, tol);
        // A decode row of the second sequence first, then the first's 40 rows again: the
        // block whose first row is alone in its sequence is left to the scalar kernel whole.
        let lone_first = Step {
            tokens: std::iter::once(5).chain(tokens(40, 3)).collect(),
            positions: std::iter::once(nb).chain(na..na + 40).collect(),
            token_seq: std::iter::once(1).chain(std::iter::repeat_n(0, 40)).collect(),
            seqs: vec![pa.clone(), pb.clone()],
            output_rows: (0..41).collect(),
            embed_mix: Vec::new(),
            hidden: Vec::new(),
        };
        p.check(&format!("{name} lone first row"), &build(41), &[lone_first], tol, tol);
    }
}
