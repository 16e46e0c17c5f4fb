//! Parity of the mixture-of-experts op against the CPU reference backend, with routing made
//! uneven on purpose: the router logits come from a table where one expert wins for every
//! token and another never does, so one expert sees all the tokens and one none.

use infr_core::{Activation, Backend, ExpertGateUp, KvDType, MoeGating, MoeParams, SharedExpert, WeightId};
use infr_quant::GgmlType;

use crate::common::*;

const VOCAB: usize = 16;
const COLS: usize = 256;
const FF: usize = 64;
const N_EXPERT: usize = 8;

/// A 3-D expert tensor `{cols, rows, n_expert}` of random values.
fn experts(w: &mut Weights, rng: &mut Rng, name: &str, ty: GgmlType, cols: usize, rows: usize) -> WeightId {
    experts_of(w, rng, name, ty, cols, rows, N_EXPERT)
}

fn experts_of(
    w: &mut Weights,
    rng: &mut Rng,
    name: &str,
    ty: GgmlType,
    cols: usize,
    rows: usize,
    n: usize,
) -> WeightId {
    let mut d = weight(name, ty, cols, rows * n, rng, 0.5);
    d.info.dims = vec![cols, rows, n];
    w.add(d)
}

/// An f32 table of `rows` rows of `cols` values.
fn f32_table(w: &mut Weights, name: &str, v: Vec<f32>, cols: usize, rows: usize) -> WeightId {
    w.add(infr_core::WeightData {
        name: name.into(),
        info: infr_core::WeightInfo { ty: GgmlType::F32, dims: vec![cols, rows] },
        bytes: infr_gguf::TensorData::from_vec(bytemuck::cast_slice(&v).to_vec()),
    })
}

/// Qwen3-MoE's routing (softmax, top-2, renormalised) over separate gate / up experts.
fn qwen3moe_params(gate: WeightId, up: WeightId, down: WeightId) -> MoeParams {
    MoeParams {
        n_expert: N_EXPERT as u32,
        n_used: 2,
        n_ff: FF as u32,
        gating: MoeGating::Softmax,
        renorm: true,
        weight_before: false,
        gate_up: ExpertGateUp::Separate { gate, up },
        down,
        act: Activation::Silu,
        expert_scale: None,
        shared: None,
        gate_up_bias: None,
        down_bias: None,
        expert_slice: None,
    }
}

/// `base` as gpt-oss runs it: softmax over the chosen, clamped SwiGLU, biased experts
/// (gate, up, down and their biases).
fn gpt_oss_params(
    base: MoeParams,
    [gate, up, down]: [WeightId; 3],
    [gate_b, up_b, down_b]: [WeightId; 3],
) -> MoeParams {
    MoeParams {
        gating: MoeGating::SoftmaxChosen,
        renorm: false,
        act: Activation::SwigluOai,
        gate_up: ExpertGateUp::Separate { gate, up },
        down,
        gate_up_bias: Some(ExpertGateUp::Separate { gate: gate_b, up: up_b }),
        down_bias: Some(down_b),
        expert_slice: None,
        ..base
    }
}

/// Router logits per token id: expert 0 far ahead for every token, the last expert far
/// behind, the others random.
fn router_table(w: &mut Weights, rng: &mut Rng) -> WeightId {
    let mut v = rng.vec(VOCAB * N_EXPERT, 2.0);
    for row in v.chunks_mut(N_EXPERT) {
        row[0] = 8.0;
        row[N_EXPERT - 1] = -8.0;
    }
    f32_table(w, "router", v, N_EXPERT, VOCAB)
}

/// Route `n_expert` Q8_0 experts (`cols` in and out, `ff` hidden), top-8, from router logits
/// where the experts in `top` tie for the first seven picks and those in `last` for the eighth
/// (which must go to the lowest id of them, as on the CPU), at 1, 5 and 40 tokens, with each of
/// the kernel sets `portable` names: picks, the softmax over all experts and the outputs must
/// match the CPU.
fn check_tied_routing(
    seed: u64,
    (n_expert, cols, ff): (usize, usize, usize),
    top: [usize; 7],
    last: [usize; 3],
    portable: &[bool],
) {
    let mut rng = Rng(seed);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, cols, VOCAB, &mut rng, 1.0));
    // The router table holds whole vectors of four (an f32 matrix's form); a count that is
    // not a multiple of four takes its first `n_expert` columns.
    let table_cols = n_expert.next_multiple_of(4);
    let mut logits = rng.vec(VOCAB * table_cols, 2.0);
    for row in logits.chunks_mut(table_cols) {
        for e in top {
            row[e] = 9.0;
        }
        for e in last {
            row[e] = 8.5;
        }
    }
    let rt = f32_table(&mut w, "router", logits, table_cols, VOCAB);
    let gate = experts_of(&mut w, &mut rng, "gate", GgmlType::Q8_0, cols, ff, n_expert);
    let up = experts_of(&mut w, &mut rng, "up", GgmlType::Q8_0, cols, ff, n_expert);
    let down = experts_of(&mut w, &mut rng, "down", GgmlType::Q8_0, ff, cols, n_expert);
    let params = MoeParams {
        n_expert: n_expert as u32,
        n_used: 8,
        n_ff: ff as u32,
        renorm: false,
        ..qwen3moe_params(gate, up, down)
    };
    for &portable in portable {
        let opts = infr_vulkan::VulkanOptions { validation: true, portable_kernels: portable, ..Default::default() };
        let Some(mut p) = Pair::with(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16), opts) else { return };
        for n in [1, 5, 40] {
            let g = graph(&w, n, n, |g| {
                let x = g.embed(xt);
                let mut l = g.embed(rt);
                if table_cols != n_expert {
                    l = g.slice_cols(l, table_cols, 0, n_expert);
                }
                g.moe(x, l, params)
            });
            let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % VOCAB as u32).collect();
            let step = [Step::simple(tokens, 0, vec![0; n.div_ceil(16)])];
            p.check(&format!("{n_expert} experts n={n} portable={portable}"), &g, &step, 2e-3, 2e-2);
        }
    }
}

/// A decode step's MoE output added to the residual and normed for an int8 matmul, as
/// every MoE layer but the last feeds the next: the norm (`norm_q8`) adds up the routed
/// experts' weighted rows and the shared expert's (sigmoid-gated or not) itself, so no
/// `moe_combine` runs, for Q4_K / Q6_K experts (the integer-dot path), and the shared expert
/// runs as each token's last routed pair; over several tokens the combine stays. Matches the
/// CPU fused or not.
#[test]
fn moe_rows_added_by_the_next_norm() {
    let mut rng = Rng(41);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, COLS, VOCAB, &mut rng, 1.0));
    // Router logits close together: every routed row carries weight in the sum.
    let logits = rng.vec(VOCAB * N_EXPERT, 0.5);
    let rt = f32_table(&mut w, "router", logits, N_EXPERT, VOCAB);
    // K-quant rows are whole 256-element super-blocks: a hidden width of 256.
    let ff = 256;
    let gate = experts(&mut w, &mut rng, "gate", GgmlType::Q4_K, COLS, ff);
    let up = experts(&mut w, &mut rng, "up", GgmlType::Q4_K, COLS, ff);
    let down = experts(&mut w, &mut rng, "down", GgmlType::Q6_K, ff, COLS);
    let norm = w.add(weight("norm", GgmlType::F32, COLS, 1, &mut rng, 1.0));
    let proj = w.add(weight("proj", GgmlType::Q8_0, COLS, 48, &mut rng, 0.05));
    let sh_gate = w.add(weight("sh_gate", GgmlType::Q4_K, COLS, ff, &mut rng, 0.5));
    let sh_up = w.add(weight("sh_up", GgmlType::Q4_K, COLS, ff, &mut rng, 0.5));
    let sh_down = w.add(weight("sh_down", GgmlType::Q6_K, ff, COLS, &mut rng, 0.5));
    let sh_inp = w.add(weight("sh_inp", GgmlType::F32, COLS, 1, &mut rng, 0.2));
    let plain = MoeParams { n_ff: ff as u32, ..qwen3moe_params(gate, up, down) };
    let shared = |gate_inp| MoeParams {
        shared: Some(SharedExpert { gate: sh_gate, up: sh_up, down: sh_down, gate_inp }),
        ..plain
    };
    let cases =
        [("routed only", plain), ("with a shared expert", shared(None)), ("with a gated one", shared(Some(sh_inp)))];
    for (what, params) in cases {
        for (fused, n) in [(true, 1usize), (true, 3), (false, 1)] {
            // A backend per case: its profile counts that case's dispatches alone.
            let Some(mut p) = Pair::with(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16), profiled(fused)) else {
                return;
            };
            {
                let g = graph(&w, n, n, |g| {
                    let x = g.embed(xt);
                    let l = g.embed(rt);
                    let f = g.moe(x, l, params);
                    let y = g.add(x, f);
                    let z = g.rms_norm(y, Some(norm), 1e-6, COLS);
                    g.linear(z, proj, None)
                });
                let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 2) % VOCAB as u32).collect();
                let step = [Step::simple(tokens, 0, vec![0])];
                p.check(&format!("{what}, fused {fused}, n={n}"), &g, &step, 2e-2, 2e-2);
                let prof = p.vk.profile().expect("profiling on");
                let combined = prof.count("moe_combine") > 0;
                let int8 = prof.totals.keys().any(|k| k.starts_with("matmul_rows_q8_moe"));
                if int8 {
                    let want = !(fused && n == 1);
                    assert_eq!(combined, want, "{what}, fused {fused}, n={n}: {:?}", prof.totals.keys());
                }
                // There the shared expert is each token's last pair of the expert matmuls
                // (gate/up and down with its slot), with no matmuls or gate of its own.
                if int8 && fused && n == 1 && params.shared.is_some() {
                    let slot_kernels = prof.totals.keys().filter(|k| k.contains("_moe.") && k.ends_with(".sh")).count();
                    let own = ["moe_shared_gate", "moe_glu_silu"].iter().map(|k| prof.count(k)).sum::<u64>();
                    assert!(slot_kernels == 2 && own == 0, "{what}: {:?}", prof.totals.keys());
                }
            }
        }
    }
}

/// More experts than the routing kernel's workgroup has threads (160, top-8, as Qwen3-MoE's
/// 128 or Qwen3.5's 256), with tied router logits, also at the last pick (lowest id: 20), in
/// threads of different lanes and strides; on the subgroup routing kernel and the
/// workgroup-tree one of devices without subgroup operations (portable kernels).
#[test]
fn moe_routing_over_many_experts_with_ties() {
    check_tied_routing(77, (160, COLS, FF), [5, 69, 133, 40, 100, 150, 159], [120, 20, 90], &[false, true]);
}

/// An expert count that is not a multiple of four (131): the ranking kernel pads its logits
/// to whole vectors of four with -inf, which must rank after every expert, the last real one
/// (130) among the tied picks included.
#[test]
fn moe_routing_over_an_odd_expert_count() {
    check_tied_routing(79, (131, COLS, FF), [2, 64, 130, 40, 99, 127, 128], [129, 3, 90], &[false]);
}

/// More experts than the ranking kernel takes (1,100 > 1,024), so routing runs on the
/// workgroup-tree kernel (`moe_route.wgsl`), ties spread over different threads. Narrow
/// experts (32 columns) keep the 3,300 expert matrices small.
#[test]
fn moe_routing_over_more_experts_than_the_rank_kernel_takes() {
    check_tied_routing(78, (1100, 32, 32), [7, 300, 519, 700, 1031, 1060, 1099], [1090, 401, 650], &[false]);
}

#[test]
fn moe_matches_cpu_with_uneven_routing() {
    let mut rng = Rng(41);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, COLS, VOCAB, &mut rng, 1.0));
    let rt = router_table(&mut w, &mut rng);
    let gate = experts(&mut w, &mut rng, "gate", GgmlType::Q8_0, COLS, FF);
    let up = experts(&mut w, &mut rng, "up", GgmlType::Q4_0, COLS, FF);
    let gate_up = experts(&mut w, &mut rng, "gate_up", GgmlType::Q4_K, COLS, 2 * FF);
    let down = experts(&mut w, &mut rng, "down", GgmlType::F16, FF, COLS);
    let down_q = experts(&mut w, &mut rng, "down_q", GgmlType::Q8_0, FF, COLS);
    let scale = w.add(weight("scale", GgmlType::F32, N_EXPERT, 1, &mut rng, 1.0));
    let sh = SharedExpert {
        gate: w.add(weight("sg", GgmlType::Q8_0, COLS, 96, &mut rng, 0.5)),
        up: w.add(weight("su", GgmlType::Q8_0, COLS, 96, &mut rng, 0.5)),
        down: w.add(weight("sd", GgmlType::Q4_0, 96, COLS, &mut rng, 0.5)),
        gate_inp: None,
    };
    let gi = w.add(weight("sgi", GgmlType::F32, COLS, 1, &mut rng, 0.2));
    // gpt-oss: MXFP4 experts with per-expert biases.
    let gate_mx = experts(&mut w, &mut rng, "gate_mx", GgmlType::MXFP4, COLS, FF);
    let up_mx = experts(&mut w, &mut rng, "up_mx", GgmlType::MXFP4, COLS, FF);
    let down_mx = experts(&mut w, &mut rng, "down_mx", GgmlType::MXFP4, FF, COLS);
    let gate_b = w.add(weight("gate_b", GgmlType::F32, FF, N_EXPERT, &mut rng, 1.0));
    let up_b = w.add(weight("up_b", GgmlType::F32, FF, N_EXPERT, &mut rng, 1.0));
    let gu_b = w.add(weight("gu_b", GgmlType::F32, 2 * FF, N_EXPERT, &mut rng, 1.0));
    let down_b = w.add(weight("down_b", GgmlType::F32, COLS, N_EXPERT, &mut rng, 1.0));
    let Some(mut p) = Pair::new(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16)) else { return };
    let base = qwen3moe_params(gate, up, down);
    let cases = [
        ("qwen3moe-style", base),
        (
            "fused gate_up, sigmoid top-1, weight before, shared expert",
            MoeParams {
                n_used: 1,
                gating: MoeGating::Sigmoid,
                renorm: false,
                weight_before: true,
                gate_up: ExpertGateUp::Fused(gate_up),
                down: down_q,
                shared: Some(sh),
                ..base
            },
        ),
        (
            "gelu, expert scales, gated shared expert",
            MoeParams {
                n_used: 3,
                act: Activation::GeluTanh,
                expert_scale: Some(scale),
                shared: Some(SharedExpert { gate_inp: Some(gi), ..sh }),
                ..base
            },
        ),
        ("softmax over the chosen", MoeParams { gating: MoeGating::SoftmaxChosen, renorm: false, ..base }),
        (
            "gpt-oss: mxfp4, biases, clamped swiglu",
            gpt_oss_params(base, [gate_mx, up_mx, down_mx], [gate_b, up_b, down_b]),
        ),
        (
            "fused gate_up bias, weight before",
            MoeParams {
                n_used: 1,
                gating: MoeGating::Sigmoid,
                renorm: false,
                weight_before: true,
                gate_up: ExpertGateUp::Fused(gate_up),
                gate_up_bias: Some(ExpertGateUp::Fused(gu_b)),
                down_bias: Some(down_b),
                expert_slice: None,
                ..base
            },
        ),
    ];
    for (name, params) in cases {
        // 40 tokens take the tiled expert matmuls (grouped by expert), fewer the per-pair
        // ones; 96 the cooperative ones where the device has cooperative matrices.
        check_moe(&mut p, &w, [xt, rt], params, &[1, 7, 40, 96], name);
    }
}

/// Llama 4's routing weight scales each expert's input, which llama.cpp's CPU then quantizes
/// (Q8_0 blocks with f16 scales for Q8_0 / Q4_0 weights): every expert path must round the
/// scaled rows, not scale the products of the rounded row (the f16 block scales then round
/// before the weight: 2-3e-2 off here on the float paths, 0.05-0.2 logits on the llama4
/// synth file at 16 tokens). Separate Q8_0 gate and Q4_0 up, F16 (float paths at every
/// count) or Q8_0 (integer-dot for few tokens) down, with and without the shared expert, at
/// 1, 7 and 40 tokens, to a tolerance those errors fail. Where a device multiplies that many
/// rows over f16 operands (cooperative matrices: the shared expert's products at 40 tokens),
/// those rows round as llama.cpp's Vulkan build does, and the check takes the MoE tests'
/// usual tolerance.
#[test]
fn moe_weight_before_rounds_the_scaled_input() {
    let mut rng = Rng(47);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, COLS, VOCAB, &mut rng, 1.0));
    let rt = router_table(&mut w, &mut rng);
    let gate = experts(&mut w, &mut rng, "gate", GgmlType::Q8_0, COLS, FF);
    let up = experts(&mut w, &mut rng, "up", GgmlType::Q4_0, COLS, FF);
    let down16 = experts(&mut w, &mut rng, "down16", GgmlType::F16, FF, COLS);
    let down8 = experts(&mut w, &mut rng, "down8", GgmlType::Q8_0, FF, COLS);
    let sh = SharedExpert {
        gate: w.add(weight("sg", GgmlType::Q8_0, COLS, 128, &mut rng, 0.5)),
        up: w.add(weight("su", GgmlType::Q8_0, COLS, 128, &mut rng, 0.5)),
        down: w.add(weight("sd", GgmlType::Q8_0, 128, COLS, &mut rng, 0.5)),
        gate_inp: None,
    };
    let Some(mut p) = Pair::new(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16)) else { return };
    for (down, shared) in [(down16, None), (down8, None), (down8, Some(sh))] {
        let params = MoeParams {
            n_used: 1,
            gating: MoeGating::Sigmoid,
            renorm: false,
            weight_before: true,
            down,
            shared,
            ..qwen3moe_params(gate, up, down)
        };
        let f16_from = p.vk.f16_min_rows();
        let rtol = |n: usize| if f16_from.is_some_and(|r| n >= r) { 2e-2 } else { 5e-5 };
        let name = format!("weight before, shared {}", shared.is_some());
        check_moe_within(&mut p, &w, [xt, rt], params, &[1, 7, 40], &name, rtol);
    }
}

/// A MoE layer over the inputs of table `tables[0]` routed by the logits of `tables[1]`,
/// against the CPU for each token count of `ns`.
fn check_moe(p: &mut Pair, w: &Weights, tables: [WeightId; 2], params: MoeParams, ns: &[usize], name: &str) {
    check_moe_within(p, w, tables, params, ns, name, |_| 2e-2);
}

/// [`check_moe`] with `rtol(n)` as the relative tolerance at `n` tokens.
fn check_moe_within(
    p: &mut Pair,
    w: &Weights,
    tables: [WeightId; 2],
    params: MoeParams,
    ns: &[usize],
    name: &str,
    rtol: impl Fn(usize) -> f32,
) {
    for &n in ns {
        let g = graph(w, n, n, |g| {
            let x = g.embed(tables[0]);
            let logits = g.embed(tables[1]);
            g.moe(x, logits, params)
        });
        let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 3) % VOCAB as u32).collect();
        p.check(&format!("{name} n={n}"), &g, &[Step::simple(tokens, 0, vec![0; n.div_ceil(16)])], 2e-3, rtol(n));
    }
}

/// Q4_K gate/up and Q6_K down experts through both cooperative loaders: raw words (the
/// default) and units dequantized as read (`VulkanOptions::coop_dequant_on_read`). 96 tokens
/// take the cooperative expert matmuls where the device has cooperative matrices, 40 the
/// tiled ones.
#[test]
fn moe_k_quant_experts_match_cpu_on_both_loaders() {
    let mut rng = Rng(43);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, COLS, VOCAB, &mut rng, 1.0));
    let rt = router_table(&mut w, &mut rng);
    // Q6_K needs whole 256-element blocks along the down product's inner dimension.
    let ff = 256;
    let gate = experts(&mut w, &mut rng, "gate", GgmlType::Q4_K, COLS, ff);
    let up = experts(&mut w, &mut rng, "up", GgmlType::Q4_K, COLS, ff);
    let down = experts(&mut w, &mut rng, "down", GgmlType::Q6_K, ff, COLS);
    let params = MoeParams { n_ff: ff as u32, ..qwen3moe_params(gate, up, down) };
    for (coop_dequant_on_read, name) in [(false, "raw units"), (true, "dequantized on read")] {
        let opts = infr_vulkan::VulkanOptions { validation: true, coop_dequant_on_read, ..Default::default() };
        let Some(mut p) = Pair::with(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16), opts) else { return };
        check_moe(&mut p, &w, [xt, rt], params, &[40, 96], name);
    }
}

/// Experts in host memory behind a device cache of a few slots (`WeightPlace::Paged`): one-
/// token steps route to experts that are, or are not, in a slot (copies in, the least
/// recently used out), a step with more pairs than slots reads host memory, and every output
/// matches the CPU. Separate, fused and biased (gpt-oss) expert tensors.
#[test]
fn paged_experts_match_cpu_across_steps() {
    let mut rng = Rng(53);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, COLS, VOCAB, &mut rng, 1.0));
    // Router logits with no favourite: every step moves the choice.
    let rt = f32_table(&mut w, "router", rng.vec(VOCAB * N_EXPERT, 2.0), N_EXPERT, VOCAB);
    let gate = experts(&mut w, &mut rng, "gate", GgmlType::Q4_K, COLS, FF);
    let up = experts(&mut w, &mut rng, "up", GgmlType::Q8_0, COLS, FF);
    let gate_up = experts(&mut w, &mut rng, "gate_up", GgmlType::Q4_K, COLS, 2 * FF);
    let down = experts(&mut w, &mut rng, "down", GgmlType::Q8_0, FF, COLS);
    let gate_mx = experts(&mut w, &mut rng, "gate_mx", GgmlType::MXFP4, COLS, FF);
    let up_mx = experts(&mut w, &mut rng, "up_mx", GgmlType::MXFP4, COLS, FF);
    let down_mx = experts(&mut w, &mut rng, "down_mx", GgmlType::MXFP4, FF, COLS);
    let gate_b = w.add(weight("gate_b", GgmlType::F32, FF, N_EXPERT, &mut rng, 1.0));
    let up_b = w.add(weight("up_b", GgmlType::F32, FF, N_EXPERT, &mut rng, 1.0));
    let down_b = w.add(weight("down_b", GgmlType::F32, COLS, N_EXPERT, &mut rng, 1.0));
    let expert_ids = [gate, up, gate_up, down, gate_mx, up_mx, down_mx, gate_b, up_b, down_b];
    const SLOTS: u32 = 3;
    let Some(mut vk) = vulkan() else { return };
    let mut cpu = cpu();
    for (i, d) in w.list.iter().enumerate() {
        let id = WeightId(i as u32);
        let place = if expert_ids.contains(&id) {
            infr_core::WeightPlace::Paged { experts: N_EXPERT as u32, slots: SLOTS }
        } else {
            infr_core::WeightPlace::Device
        };
        vk.load_weight_placed(id, d, place).expect("load weight");
        cpu.load_weight(id, d).expect("load weight");
    }
    let spec = kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16);
    vk.init_kv(&spec).unwrap();
    cpu.init_kv(&spec).unwrap();
    let mut p = Pair { vk, cpu };
    assert_eq!(p.vk.expert_cache_stats().unwrap(), Some((0, 0)));
    let base = qwen3moe_params(gate, up, down);
    let cases = [
        ("separate", base),
        ("fused, top-3", MoeParams { n_used: 3, gate_up: ExpertGateUp::Fused(gate_up), ..base }),
        ("gpt-oss: mxfp4 and biases", gpt_oss_params(base, [gate_mx, up_mx, down_mx], [gate_b, up_b, down_b])),
    ];
    let mut routed = 0;
    for (name, params) in cases {
        let one = graph(&w, 1, 1, |g| {
            let x = g.embed(xt);
            let logits = g.embed(rt);
            g.moe(x, logits, params)
        });
        // Six tokens: more pairs than slots, read from host memory.
        let six = graph(&w, 6, 6, |g| {
            let x = g.embed(xt);
            let logits = g.embed(rt);
            g.moe(x, logits, params)
        });
        let steps: Vec<Step> =
            (0..VOCAB as u32).map(|t| Step::simple(vec![(t * 7 + 2) % VOCAB as u32], 0, vec![0])).collect();
        p.check(&format!("paged {name}, one token"), &one, &steps[..8], 2e-3, 2e-2);
        let batch = Step::simple((0..6).map(|t| (t * 5 + 1) % VOCAB as u32).collect(), 0, vec![0]);
        p.check(&format!("paged {name}, six tokens"), &six, &[batch], 2e-3, 2e-2);
        p.check(&format!("paged {name}, one token after six"), &one, &steps[8..], 2e-3, 2e-2);
        routed += VOCAB as u64 * params.n_used as u64;
    }
    // Each one-token step found every routed expert in a slot or copied it in.
    let (hits, misses) = p.vk.expert_cache_stats().unwrap().expect("paged experts");
    assert_eq!(hits + misses, routed, "hits {hits}, misses {misses}");
    assert!(hits > 0 && misses > 0, "hits {hits}, misses {misses}");
}

/// Experts `[first, first + count)` of a 3-D expert tensor, or rows of a `{m, n_expert}`
/// bias: a byte range of the outermost dimension, as expert parallelism places them.
fn slice_experts(w: &mut Weights, id: WeightId, first: usize, count: usize) -> WeightId {
    let d = &w.list[id.0 as usize];
    let n = *d.info.dims.last().expect("dims");
    let per = d.bytes.len() / n;
    let mut dims = d.info.dims.clone();
    *dims.last_mut().expect("dims") = count;
    let data = infr_core::WeightData {
        name: format!("{}.{first}+{count}", d.name),
        info: infr_core::WeightInfo { ty: d.info.ty, dims },
        bytes: infr_gguf::TensorData::from_vec(d.bytes[first * per..(first + count) * per].to_vec()),
    };
    w.add(data)
}

/// Expert parallelism's op: the MoE over slices of the experts (the shared expert in the
/// first) adds up to the whole op on the CPU, and each slice on Vulkan matches the CPU's,
/// with one slice holding the expert every token picks and another the one none picks.
#[test]
fn moe_over_expert_slices_adds_up_to_the_whole() {
    let mut rng = Rng(53);
    let mut w = Weights::default();
    let xt = w.add(weight("x", GgmlType::F32, COLS, VOCAB, &mut rng, 1.0));
    let rt = router_table(&mut w, &mut rng);
    let gate = experts(&mut w, &mut rng, "gate", GgmlType::Q8_0, COLS, FF);
    let up = experts(&mut w, &mut rng, "up", GgmlType::Q4_0, COLS, FF);
    let down = experts(&mut w, &mut rng, "down", GgmlType::Q8_0, FF, COLS);
    let scale = w.add(weight("scale", GgmlType::F32, N_EXPERT, 1, &mut rng, 1.0));
    let sh = SharedExpert {
        gate: w.add(weight("sg", GgmlType::Q8_0, COLS, 96, &mut rng, 0.5)),
        up: w.add(weight("su", GgmlType::Q8_0, COLS, 96, &mut rng, 0.5)),
        down: w.add(weight("sd", GgmlType::Q4_0, 96, COLS, &mut rng, 0.5)),
        gate_inp: None,
    };
    let gate_mx = experts(&mut w, &mut rng, "gate_mx", GgmlType::MXFP4, COLS, FF);
    let up_mx = experts(&mut w, &mut rng, "up_mx", GgmlType::MXFP4, COLS, FF);
    let down_mx = experts(&mut w, &mut rng, "down_mx", GgmlType::MXFP4, FF, COLS);
    let gate_b = w.add(weight("gate_b", GgmlType::F32, FF, N_EXPERT, &mut rng, 1.0));
    let up_b = w.add(weight("up_b", GgmlType::F32, FF, N_EXPERT, &mut rng, 1.0));
    let down_b = w.add(weight("down_b", GgmlType::F32, COLS, N_EXPERT, &mut rng, 1.0));
    let base = MoeParams { n_used: 3, expert_scale: Some(scale), shared: Some(sh), ..qwen3moe_params(gate, up, down) };
    let oss = gpt_oss_params(base, [gate_mx, up_mx, down_mx], [gate_b, up_b, down_b]);
    // Each case's full op and its slices (first, count), every expert tensor cut alike.
    let slices = [(0usize, 3usize), (3, 5)];
    let mut cases = Vec::new();
    for (name, full) in [("qwen3moe-style, scaled, shared", base), ("gpt-oss: mxfp4, biases", oss)] {
        let mut parts = Vec::new();
        for (i, &(first, count)) in slices.iter().enumerate() {
            let mut cut = |id: WeightId| slice_experts(&mut w, id, first, count);
            let ExpertGateUp::Separate { gate, up } = full.gate_up else { unreachable!("separate gate/up") };
            let gate_up_bias = match full.gate_up_bias {
                Some(ExpertGateUp::Separate { gate, up }) => {
                    Some(ExpertGateUp::Separate { gate: cut(gate), up: cut(up) })
                }
                _ => None,
            };
            parts.push(MoeParams {
                gate_up: ExpertGateUp::Separate { gate: cut(gate), up: cut(up) },
                down: cut(full.down),
                gate_up_bias,
                down_bias: full.down_bias.map(&mut cut),
                shared: if i == 0 { full.shared } else { None },
                expert_slice: Some((first as u32, count as u32)),
                ..full
            });
        }
        cases.push((name, full, parts));
    }
    let Some(mut p) = Pair::new(&w, &kv_spec(1, 1, 2, 2, 2, 16, KvDType::F16)) else { return };
    for (name, full, parts) in &cases {
        for n in [1usize, 3, 40] {
            let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 2) % VOCAB as u32).collect();
            let step = Step::simple(tokens, 0, vec![0; n.div_ceil(16)]);
            let whole = graph(&w, n, n, |g| {
                let (x, l) = (g.embed(xt), g.embed(rt));
                g.moe(x, l, *full)
            });
            let summed = graph(&w, n, n, |g| {
                let (x, l) = (g.embed(xt), g.embed(rt));
                let a = g.moe(x, l, parts[0]);
                let b = g.moe(x, l, parts[1]);
                g.add(a, b)
            });
            let plan = p.cpu.compile(&whole).expect("compile");
            let want = step.run(&mut p.cpu, plan);
            let plan = p.cpu.compile(&summed).expect("compile");
            let got = step.run(&mut p.cpu, plan);
            assert_close(&format!("{name} n={n}: slices summed on the CPU"), &got, &want, 1e-4, 1e-4);
            for (i, part) in parts.iter().enumerate() {
                let g = graph(&w, n, n, |g| {
                    let (x, l) = (g.embed(xt), g.embed(rt));
                    g.moe(x, l, *part)
                });
                p.check(&format!("{name} n={n}: slice {i}"), &g, std::slice::from_ref(&step), 2e-3, 2e-2);
            }
        }
    }
}
