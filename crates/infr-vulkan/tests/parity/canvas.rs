//! The device-side diffusion sampler (`execute_canvas_sample`) against the same sampler on
//! the host over the plan's own logits: a vocabulary of three chunks (the last partial), a
//! step without a mixture, then a step conditioned on the probabilities the first left on the
//! device, checked against a step given the host's probabilities.

use infr_core::{Backend, BackendError, CanvasDraw, CanvasSampleInputs, GgmlType, KvDType};

use crate::common::*;

const K: usize = 64;
const VOCAB: usize = 10_000;

/// The host sampler of `infr_engine::diffusion` (f64 sums): per row the probabilities at
/// temperature `t`, entropy, argmax (first) and the inverse-CDF draw with `u`.
fn host_sample(logits: &[f32], t: f32, uniforms: &[f32]) -> (Vec<f32>, Vec<(f64, u32, u32)>) {
    let mut probs = Vec::with_capacity(logits.len());
    let mut rows = Vec::new();
    for (row, &u) in logits.chunks(VOCAB).zip(uniforms) {
        let s: Vec<f32> = row.iter().map(|&x| x / t).collect();
        let (mut best, mut max) = (0, f32::NEG_INFINITY);
        for (i, &x) in s.iter().enumerate() {
            if x > max {
                (best, max) = (i, x);
            }
        }
        let lse = max as f64 + s.iter().map(|&x| ((x - max) as f64).exp()).sum::<f64>().ln();
        let p: Vec<f32> = s.iter().map(|&x| (x as f64 - lse).exp() as f32).collect();
        let h: f64 = s.iter().map(|&x| x as f64 - lse).map(|lp| -lp.exp() * lp).sum();
        let total: f64 = p.iter().map(|&x| x as f64).sum();
        let mut r = u as f64 * total;
        let draw = p.iter().position(|&x| {
            r -= x as f64;
            r < 0.0
        });
        rows.push((h, best as u32, draw.unwrap_or(VOCAB - 1) as u32));
        probs.extend(p);
    }
    (probs, rows)
}

fn check(what: &str, got: &[CanvasDraw], want: &[(f64, u32, u32)]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g.entropy as f64 - w.0).abs() < 1e-4 * w.0.max(1.0),
            "{what} row {i}: entropy {} vs {}",
            g.entropy,
            w.0
        );
        assert_eq!((g.argmax, g.sample), (w.1, w.2), "{what} row {i}: argmax and draw");
    }
    assert_eq!(got.len(), want.len(), "{what}: rows");
}

#[test]
fn canvas_sampler_matches_the_host_sampler() {
    let Some(mut vk) = vulkan() else { return };
    vk.init_kv(&kv_spec(1, 1, 2, 2, 1, 16, KvDType::F32)).unwrap();
    let n = 11;
    let mut rng = Rng(77);
    let mut w = Weights::default();
    let table = w.add(weight("tok", GgmlType::F32, K, VOCAB, &mut rng, 0.6));
    w.load(&mut vk);
    // Embedding plus mixture, then the tied head: logits over the mixture's vocabulary.
    let g = graph(&w, n, n, |g| {
        let e = g.embed(table);
        let m = g.mix_embed(table);
        let x = g.add(e, m);
        g.linear(x, table, None)
    });
    let p = vk.compile(&g).unwrap();
    // Prepared at start, the sampler allocates nothing on first use.
    vk.prepare_canvas_sample(p).unwrap();
    let prepared = vk.memory_available();
    let step = Step::simple((0..n as u32).map(|i| i * 907 % VOCAB as u32).collect(), 0, vec![0]);
    let (t1, t2) = (0.8f32, 0.5f32);
    let u1: Vec<f32> = (0..n).map(|_| rng.f().abs().min(0.999)).collect();
    let u2: Vec<f32> = (0..n).map(|_| rng.f().abs().min(0.999)).collect();

    // Reusing a mixture before any sample is an error.
    let reuse = |t, u| CanvasSampleInputs { temperature: t, uniforms: u, reuse_mix: true };
    assert!(matches!(step.run_canvas(&mut vk, p, &reuse(t1, &u1)), Err(BackendError::InvalidInput(_))));
    let d1 = step.run_canvas(&mut vk, p, &CanvasSampleInputs { temperature: t1, uniforms: &u1, reuse_mix: false });
    let d2 = step.run_canvas(&mut vk, p, &reuse(t2, &u2));
    let (d1, d2) = (d1.expect("first step"), d2.expect("second step"));
    assert_eq!(vk.memory_available(), prepared, "sampling after prepare_canvas_sample allocated");

    // The same steps with the logits read back and sampled on the host.
    let l1 = step.run(&mut vk, p);
    let (p1, want1) = host_sample(&l1, t1, &u1);
    check("step 1", &d1, &want1);
    let mut with_mix = Step::simple(step.tokens.clone(), 0, vec![0]);
    with_mix.embed_mix = p1;
    let l2 = with_mix.run(&mut vk, p);
    let (_, want2) = host_sample(&l2, t2, &u2);
    check("step 2 (device mixture)", &d2, &want2);
    // The rows differ from each other and the mixture changed the second step's logits.
    assert!(want1.iter().any(|r| r.2 != want1[0].2), "draws differ between rows");
    assert!(l1.iter().zip(&l2).any(|(a, b)| (a - b).abs() > 1e-3), "the mixture moves the logits");

    // A host mixture with a reuse request is refused; a plain step after a host step cannot reuse.
    let mut both = Step::simple(step.tokens.clone(), 0, vec![0]);
    both.embed_mix = vec![0.0; n * VOCAB];
    assert!(matches!(both.run_canvas(&mut vk, p, &reuse(t1, &u1)), Err(BackendError::InvalidInput(_))));
    assert!(matches!(step.run_canvas(&mut vk, p, &reuse(t1, &u1)), Err(BackendError::InvalidInput(_))));
    assert_clean(&vk);
}
