//! What a step reads back: each output row's k best selected on the device (after a
//! sampler's adjustments), and steps submitted and waited for separately.

use infr_core::{Backend, KvDType, LogitAdjust, PlanId, WeightData};
use infr_gguf::TensorData;
use infr_quant::GgmlType;

use crate::common::*;
use crate::matmul::K;

/// `table` (token embeddings) and `head` (an output projection) loaded on `vk` with a
/// one-page cache, and the plan of three rows: the embeddings through the head.
fn head_plan(vk: &mut infr_vulkan::VulkanBackend, table: WeightData, head: WeightData) -> PlanId {
    let mut w = Weights::default();
    let (table, head) = (w.add(table), w.add(head));
    w.load(vk);
    vk.init_kv(&kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)).unwrap();
    let g = graph(&w, 3, 3, |g| {
        let x = g.embed(table);
        g.linear(x, head, None)
    });
    vk.compile(&g).unwrap()
}

/// `execute_top_k` selects each output row's k best on the device (after a sampler's logit
/// adjustments where given): the same indices and
/// values as selecting from the full rows (ties: the lower index first), for several rows
/// of a 5,000-wide output (three selection chunks) and k from 1 to 64.
#[test]
fn device_top_k_matches_full_rows() {
    let Some(mut vk) = vulkan() else { return };
    let (vocab, width) = (8, 5000);
    let mut rng = Rng(91);
    let table = weight("tok", GgmlType::F32, K, vocab, &mut rng, 1.0);
    let mut head = weight("head", GgmlType::F32, K, width, &mut rng, 0.5);
    // Rows 17 and 4321 both equal token 1's embedding: row 0 (token 1) has its two best
    // logits exactly tied, and 17 must come first.
    let mut bytes = head.bytes.to_vec();
    let row = |r: usize| r * K * 4..(r + 1) * K * 4;
    let tok1 = table.bytes[row(1)].to_vec();
    bytes[row(17)].copy_from_slice(&tok1);
    bytes[row(4321)].copy_from_slice(&tok1);
    head.bytes = TensorData::from_vec(bytes);
    let plan = head_plan(&mut vk, table, head);
    let step = Step::simple(vec![1, 5, 2], 0, vec![0; 8]);
    let full = step.run(&mut vk, plan);
    // Five different k then the first again: the plan keeps four selection tails, so this
    // also rebuilds an evicted one.
    for k in [1usize, 7, 40, 64, 3, 1] {
        let got = step.run_top_k(&mut vk, plan, k);
        assert_eq!(got.len(), 3);
        for (r, g) in got.iter().enumerate() {
            let want = infr_core::top_k(&full[r * width..(r + 1) * width], k);
            assert_eq!(g, &want, "row {r}, k = {k}");
        }
        assert_eq!(got[0][0].0, 17, "tie at the top of row 0: {:?}", &got[0][..k.min(3)]);
        if k > 1 {
            assert_eq!((got[0][1].0, got[0][1].1), (4321, got[0][0].1));
        }
    }
    // A sampler's logit bias and penalties, applied on the device before the selection: the
    // same winners as selecting from the rows adjusted on the host. Row 0 loses its tied
    // best pair (a ban and a penalty), row 1 gets a token from the bottom lifted to the top,
    // row 2 has none; a token past the vocabulary is ignored.
    let lowest = |r: usize| {
        let row = &full[r * width..(r + 1) * width];
        (0..width).min_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap() as u32
    };
    let adjust = vec![
        vec![
            LogitAdjust { token: 17, bias: f32::NEG_INFINITY, repeat: 1.0, sub: 0.0 },
            LogitAdjust { token: 300, bias: 0.0, repeat: 1.3, sub: 0.7 },
            LogitAdjust { token: 4321, bias: 0.0, repeat: 1.3, sub: 0.7 },
            LogitAdjust { token: width as u32 + 3, bias: 50.0, repeat: 1.0, sub: 0.0 },
        ],
        vec![LogitAdjust { token: lowest(1), bias: 100.0, repeat: 2.0, sub: -1.0 }],
    ];
    let mut adjusted = full.clone();
    infr_core::adjust_rows(&mut adjusted, 3, &adjust);
    for k in [1usize, 40] {
        let got = step.run_top_k_adjusted(&mut vk, plan, k, &adjust).unwrap();
        for (r, g) in got.iter().enumerate() {
            let want = infr_core::top_k(&adjusted[r * width..(r + 1) * width], k);
            assert_eq!(g.len(), want.len(), "row {r}, k = {k}");
            for (a, b) in g.iter().zip(&want) {
                assert!(a.0 == b.0 && (a.1 - b.1).abs() <= 1e-5 * b.1.abs(), "row {r}, k = {k}: {g:?} vs {want:?}");
            }
        }
        assert_ne!(got[0][0].0, 17);
        assert_eq!(got[1][0].0, lowest(1));
    }
    // And the whole-row and unadjusted selections after it are untouched by it.
    assert_eq!(step.run_top_k(&mut vk, plan, 7)[0][0].0, 17);
    assert_clean(&vk);
}

/// `submit` returns before the step finishes and `wait` gives what `execute` /
/// `execute_top_k` give: whole rows, device top-k with adjustments, a top-k too wide for the
/// device (selected on the host at `wait`); a step in flight when another call needs the
/// device is finished first and keeps its results; waiting for nothing is an error.
#[test]
fn submitted_steps_match_executed_ones() {
    use infr_core::{Readback, StepOutput, Submitted};
    let Some(mut vk) = vulkan() else { return };
    let (vocab, width) = (8, 3000);
    let mut rng = Rng(92);
    let table = weight("tok", GgmlType::F32, K, vocab, &mut rng, 1.0);
    let plan = head_plan(&mut vk, table, weight("head", GgmlType::Q8_0, K, width, &mut rng, 0.5));
    let (one, two) = (Step::simple(vec![1, 5, 2], 0, vec![0; 8]), Step::simple(vec![3, 4, 6], 0, vec![0; 8]));
    let (full1, full2) = (one.run(&mut vk, plan), two.run(&mut vk, plan));
    assert_ne!(full1, full2);
    let top = |full: &[f32], k: usize| -> Vec<Vec<(u32, f32)>> {
        (0..3).map(|r| infr_core::top_k(&full[r * width..(r + 1) * width], k)).collect()
    };
    let sub = one.with_inputs(|inp| vk.submit(plan, inp, Readback::Rows)).unwrap();
    assert_eq!(vk.wait(sub).unwrap(), StepOutput::Rows(full1.clone()));
    let adjust = vec![vec![LogitAdjust { token: 7, bias: 1000.0, repeat: 1.0, sub: 0.0 }]];
    let sub = one.with_inputs(|inp| vk.submit(plan, inp, Readback::TopK { k: 5, adjust: &adjust })).unwrap();
    let StepOutput::TopK(got) = vk.wait(sub).unwrap() else { panic!("rows for a top-k readback") };
    assert_eq!(got[0][0].0, 7);
    assert_eq!(got[1..], top(&full1, 5)[1..]);
    // Wider than the device selection: whole rows back, selected on the host.
    let sub = two.with_inputs(|inp| vk.submit(plan, inp, Readback::TopK { k: 100, adjust: &[] })).unwrap();
    assert_eq!(vk.wait(sub).unwrap(), StepOutput::TopK(top(&full2, 100)));
    // Another step while one is in flight: the first finishes first and keeps its rows.
    let sub = one.with_inputs(|inp| vk.submit(plan, inp, Readback::Rows)).unwrap();
    assert_eq!(two.run(&mut vk, plan), full2);
    assert_eq!(vk.wait(sub).unwrap(), StepOutput::Rows(full1));
    let stray = Submitted { plan, done: None, host_top_k: None, rows: 3 };
    assert!(vk.wait(stray).is_err());
    assert_clean(&vk);
}
