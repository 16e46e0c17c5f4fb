//! Time the diffusion sampler's host work for one denoising step of a canvas (softmax,
//! entropy and argmax of every row, then one draw per row), on random logits:
//! `cargo run --release -p infr-engine --example diffusion_sampler -- [ROWS] [VOCAB] [REPS]`
//! (default 256 rows of DiffusionGemma's 262,144 tokens). `RAYON_NUM_THREADS` sets the threads.

use std::time::Instant;

use infr_engine::{canvas_stats, NoiseSource, SeededNoise};

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>().expect("a number"));
    let rows = args.next().unwrap_or(256);
    let vocab = args.next().unwrap_or(262_144);
    let reps = args.next().unwrap_or(3);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let logits: Vec<f32> = (0..rows * vocab)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 20.0 - 10.0
        })
        .collect();
    let mut noise = SeededNoise::new(7);
    let (mut stats, mut draw) = (0.0, 0.0);
    for _ in 0..reps {
        let t = Instant::now();
        let (probs, entropy, _) = canvas_stats(&logits, 0.8, vocab);
        stats += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let picks = noise.categorical(&probs, vocab);
        draw += t.elapsed().as_secs_f64();
        assert_eq!((picks.len(), entropy.len()), (rows, rows));
    }
    let threads = rayon::current_num_threads();
    println!(
        "{rows} x {vocab} on {threads} threads: stats {:.1} ms, draws {:.1} ms per step",
        stats * 1e3 / reps as f64,
        draw * 1e3 / reps as f64
    );
}
