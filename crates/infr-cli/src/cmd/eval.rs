//! `infr eval`: logits per position in the oracle JSON shape, for checking against llama.cpp.

use anyhow::{bail, Result};
use infr_engine::{RunnerOptions, Sampler, SamplingParams};
use serde_json::json;

use crate::load::{self, DeviceArgs};

/// Arguments of `infr eval`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file.
    pub model: String,
    /// Token ids to run as one prompt (JSON array or comma separated).
    #[arg(long, conflicts_with = "prompt")]
    pub tokens: Option<String>,
    /// Text to tokenize (with BOS and special tokens) instead of `--tokens`.
    #[arg(long)]
    pub prompt: Option<String>,
    /// Top-k (id, logit) pairs per row.
    #[arg(long, default_value_t = 40)]
    pub top: usize,
    /// Append a greedy continuation of N tokens (their rows are included).
    #[arg(long, default_value_t = 0)]
    pub gen: usize,
    /// Print JSON (the only format for now; accepted for clarity).
    #[arg(long)]
    pub json: bool,
    /// Prefill chunk size.
    #[arg(long, default_value_t = 512)]
    pub ubatch: usize,
    /// KV cache type.
    #[arg(long, default_value = "f16")]
    pub kv_type: String,
    #[command(flatten)]
    pub device: DeviceArgs,
}

/// The top-k of a row and its log-sum-exp (f64).
pub fn row_summary(row: &[f32], k: usize) -> (f64, Vec<(u32, f32)>) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    let k = k.min(row.len());
    if k > 0 && k < row.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| row[b as usize].total_cmp(&row[a as usize]));
    }
    idx.truncate(k);
    idx.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
    (lse, idx.into_iter().map(|i| (i, row[i as usize])).collect())
}

/// Run `infr eval`.
pub fn run(a: Args) -> Result<()> {
    let w = load::open_weights(&a.model)?;
    let prompt: Vec<u32> = match (&a.tokens, &a.prompt) {
        (Some(t), _) => super::tokenize::parse_ids(t)?,
        (None, Some(p)) => load::tokenizer(&w)?.encode(p, true, true),
        (None, None) => bail!("give --tokens or --prompt"),
    };
    if prompt.is_empty() {
        bail!("no tokens to evaluate");
    }
    let opts = RunnerOptions {
        n_ctx: prompt.len() + a.gen + 1,
        n_seq: 1,
        ubatch: a.ubatch,
        kv_dtype: load::kv_dtype(&a.kv_type)?,
        ..Default::default()
    };
    let mut r = load::runner(&w, &a.device, &a.device.resolve(load::Flags::default())?, opts)?;
    let nv = r.n_vocab();
    if let Some(bad) = prompt.iter().find(|&&t| t as usize >= nv) {
        bail!("token id {bad} is outside the vocabulary of {nv} tokens");
    }
    let seq = r.add_sequence();
    let logits = r.prefill(seq, &prompt, true)?;
    let mut rows: Vec<Vec<f32>> = logits.chunks(nv).map(<[f32]>::to_vec).collect();
    let mut sampler = Sampler::new(SamplingParams::greedy());
    let mut generated = Vec::new();
    for _ in 0..a.gen {
        let last = rows.last().expect("at least one row");
        let next = sampler.sample(last, &[]);
        generated.push(next);
        let out = r.step(&[infr_engine::StepItem { seq, tokens: &[next], all_logits: false }])?;
        rows.push(out.into_iter().next().expect("one item"));
    }
    let rows_json: Vec<_> = rows
        .iter()
        .enumerate()
        .map(|(pos, row)| {
            let (lse, top) = row_summary(row, a.top);
            json!({"pos": pos, "lse": lse, "top": top.iter().map(|&(i, l)| json!([i, l])).collect::<Vec<_>>()})
        })
        .collect();
    let out = json!({
        "model": a.model,
        "device": r.device().id,
        "n_vocab": nv,
        "prompt_ids": prompt,
        "greedy_ids": generated,
        "rows": rows_json,
    });
    println!("{out}");
    Ok(())
}
