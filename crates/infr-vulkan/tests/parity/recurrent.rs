//! Parity of the recurrent ops (causal conv with its window, gated delta rule) and the column
//! slice against the CPU reference, over steps that carry state: a fresh sequence, a prompt
//! continued in chunks of uneven length, two sequences sharing a step (one starting at
//! position 0), single-token decode steps.

use infr_core::{Conv1dParams, DeltaNetParams, KvDType, StateLayerSpec};
use infr_quant::GgmlType;

use crate::common::*;

const VOCAB: usize = 16;
const HK: usize = 2;
const HV: usize = 4;
const D: usize = 32;
const C: usize = (2 * HK + HV) * D;
const TAPS: usize = 4;

/// A step of `a.1` tokens of sequence 0 from position `a.0` and `b.1` of sequence 1 from
/// `b.0` (index = state slot = page).
fn two(a: (u32, usize), b: (u32, usize), salt: u32) -> Step {
    let toks = |n: usize, salt: u32| -> Vec<u32> { (0..n as u32).map(|i| (i * 5 + salt) % VOCAB as u32).collect() };
    let (pa, na) = a;
    let (pb, nb) = b;
    let mut positions: Vec<u32> = (pa..pa + na as u32).collect();
    positions.extend(pb..pb + nb as u32);
    let mut token_seq = vec![0u32; na];
    token_seq.extend(vec![1u32; nb]);
    Step {
        tokens: toks(na + nb, salt),
        positions,
        token_seq,
        seqs: vec![vec![0], vec![1]],
        output_rows: (0..(na + nb) as u32).collect(),
        embed_mix: Vec::new(),
        hidden: Vec::new(),
    }
}

/// Short steps over two sequences.
fn steps() -> Vec<Step> {
    vec![
        two((0, 5), (0, 0), 1),
        two((5, 3), (0, 2), 2),
        two((8, 1), (2, 1), 3),
        two((9, 1), (3, 1), 4),
        two((10, 4), (4, 3), 5),
        // Sequence 0 restarts at position 0 in the middle of the run.
        two((0, 2), (7, 1), 6),
    ]
}

fn state_spec() -> infr_core::KvSpec {
    let mut kv = kv_spec(1, 1, 2, 2, 2, 256, KvDType::F16);
    kv.states = vec![
        StateLayerSpec { floats: ((TAPS - 1) * C) as u32 },
        StateLayerSpec { floats: ((TAPS - 1) * C) as u32 },
        StateLayerSpec { floats: (HV * D * D) as u32 },
        StateLayerSpec { floats: (HV * D * D) as u32 },
    ];
    kv.n_state_slots = 2;
    kv
}

#[test]
fn conv_and_delta_rule_match_cpu_across_steps() {
    check_across_steps(infr_vulkan::VulkanOptions { validation: true, ..Default::default() }, &steps());
}

/// The same without fusions: the recurrence reads the separately sliced and normed q, k, v.
#[test]
fn conv_and_delta_rule_match_cpu_unfused() {
    let opts = infr_vulkan::VulkanOptions { validation: true, disable_fusion: true, ..Default::default() };
    check_across_steps(opts, &steps());
}

/// Prompt-length steps over two sequences: runs that start inside a chunk of the chunked
/// form, cross several chunk ends (chunks end at positions that are multiples of 32) and
/// several of the recurrence's staged token blocks (16 tokens), continue a state; a restart.
fn long_steps() -> Vec<Step> {
    vec![
        two((0, 45), (0, 0), 1),
        two((45, 40), (0, 33), 2),
        two((85, 1), (33, 70), 3),
        two((86, 2), (103, 1), 4),
        two((0, 3), (104, 37), 5),
    ]
}

/// The recurrence (one token after another, staged in blocks) over long runs.
#[test]
fn delta_rule_matches_cpu_over_long_runs() {
    check_across_steps(infr_vulkan::VulkanOptions { validation: true, ..Default::default() }, &long_steps());
}

/// The chunked form of the delta rule (taken by every step of two tokens or more here).
#[test]
fn chunked_delta_rule_matches_cpu_across_steps() {
    let opts = infr_vulkan::VulkanOptions { validation: true, delta_chunk_min: 2, ..Default::default() };
    check_across_steps(opts, &long_steps());
}

fn check_across_steps(opts: infr_vulkan::VulkanOptions, s: &[Step]) {
    let mut rng = Rng(77);
    let mut w = Weights::default();
    let x = w.add(weight("x", GgmlType::F32, C, VOCAB, &mut rng, 1.0));
    let a = w.add(weight("alpha", GgmlType::F32, HV, VOCAB, &mut rng, 2.0));
    let b = w.add(weight("beta", GgmlType::F32, HV, VOCAB, &mut rng, 2.0));
    let taps = w.add(weight("taps", GgmlType::F32, TAPS, C, &mut rng, 0.5));
    // q, k and v of their own (not slices of one tensor: the kernel reads them unfused).
    let xq = w.add(weight("xq", GgmlType::F32, HK * D, VOCAB, &mut rng, 1.0));
    let xk = w.add(weight("xk", GgmlType::F32, HK * D, VOCAB, &mut rng, 1.0));
    let xv = w.add(weight("xv", GgmlType::F32, HV * D, VOCAB, &mut rng, 1.0));
    let mut decay = weight("decay", GgmlType::F32, HV, 1, &mut rng, 1.0);
    let neg: Vec<f32> = dequant(&decay).iter().map(|v| -v.abs() - 0.1).collect();
    decay.bytes = infr_gguf::TensorData::from_vec(bytemuck::cast_slice(&neg).to_vec());
    let decay = w.add(decay);
    let kv = state_spec();
    let Some(mut pair) = Pair::with(&w, &kv, opts) else { return };
    for step in s {
        let n = step.tokens.len();
        let conv = |state: u32| Conv1dParams { weight: taps, kernel: TAPS as u32, state, silu: true };
        // The conv alone (its own window), then the whole DeltaNet mixer on another window.
        let g = graph(&w, n, n, |g| {
            let t = g.embed(x);
            let c = g.conv1d(t, conv(0));
            g.output_rows(c)
        });
        pair.check(&format!("conv1d n={n}"), &g, std::slice::from_ref(step), 1e-5, 1e-5);
        let l2 = |g: &mut infr_core::GraphBuilder<'_>, t| {
            let t = g.rms_norm(t, None, 1e-6 / D as f32, D);
            g.scale(t, 1.0 / (D as f32).sqrt())
        };
        let params = |state: u32| DeltaNetParams {
            n_k_head: HK as u32,
            n_v_head: HV as u32,
            head_dim: D as u32,
            decay,
            scale: 1.0 / (D as f32).sqrt(),
            state,
        };
        // The mixer as the models build it: q, k and v sliced from the conv's output, q and k
        // L2-normed (read in place by the Vulkan recurrence, norms folded in).
        let g = graph(&w, n, n, |g| {
            let t = g.embed(x);
            let c = g.conv1d(t, conv(1));
            let q = g.slice_cols(c, C, 0, HK * D);
            let q = l2(g, q);
            let k = g.slice_cols(c, C, HK * D, HK * D);
            let k = l2(g, k);
            let v = g.slice_cols(c, C, 2 * HK * D, HV * D);
            let (al, be) = (g.embed(a), g.embed(b));
            let o = g.delta_net(q, k, v, al, be, params(2));
            g.output_rows(o)
        });
        pair.check(&format!("delta_net n={n}"), &g, std::slice::from_ref(step), 1e-4, 1e-4);
        // q, k and v of their own tensors (k normed, q not).
        let g = graph(&w, n, n, |g| {
            let (q, k, v) = (g.embed(xq), g.embed(xk), g.embed(xv));
            let k = l2(g, k);
            let (al, be) = (g.embed(a), g.embed(b));
            let o = g.delta_net(q, k, v, al, be, params(3));
            g.output_rows(o)
        });
        pair.check(&format!("delta_net unfused n={n}"), &g, std::slice::from_ref(step), 1e-4, 1e-4);
    }
}

#[test]
fn slice_cols_matches_cpu() {
    let mut rng = Rng(5);
    let mut w = Weights::default();
    let x = w.add(weight("x", GgmlType::F32, 96, VOCAB, &mut rng, 1.0));
    let Some(mut pair) = Pair::new(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16)) else { return };
    for (period, offset, len) in [(96, 0, 96), (96, 32, 40), (24, 12, 12), (8, 1, 3)] {
        let g = graph(&w, 7, 7, |g| {
            let t = g.embed(x);
            let s = g.slice_cols(t, period, offset, len);
            g.output_rows(s)
        });
        let step = Step::simple((0..7).collect(), 0, vec![0]);
        pair.check(&format!("slice_cols {period}/{offset}/{len}"), &g, &[step], 0.0, 0.0);
    }
}
