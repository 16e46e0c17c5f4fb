//! `infr inspect MODEL`: what is in a GGUF file, readable at a glance.

use std::collections::BTreeMap;

use anyhow::Result;
use infr_core::WeightSource;
use infr_gguf::Value;

use crate::load;

/// Arguments of `infr inspect`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Model file.
    pub model: String,
    /// List every tensor (default: a summary by type plus the first few).
    #[arg(long)]
    pub tensors: bool,
    /// Print the whole chat template.
    #[arg(long)]
    pub template: bool,
    /// Print every metadata array in full.
    #[arg(long)]
    pub full: bool,
}

fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", units[u])
    }
}

fn human_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1}K", n as f64 / 1e3),
        n => n.to_string(),
    }
}

/// Run `infr inspect`.
pub fn run(a: Args) -> Result<()> {
    let w = load::open_weights(&a.model)?;
    let g = w.gguf();
    let meta = w.metadata();
    let path = &g.paths()[0];
    let file_bytes: u64 = g.shards().iter().map(|s| s.file_len()).sum();
    let n_params: u64 = g.tensors().map(|t| t.info.n_elements()).sum();
    let arch = meta.str("general.architecture")?.unwrap_or("?");
    println!("{}", path.display());
    println!("  name          {}", meta.str("general.name")?.unwrap_or("-"));
    println!("  architecture  {arch}");
    println!(
        "  size          {} in {} file(s), GGUF v{}",
        human_bytes(file_bytes),
        g.shards().len(),
        g.shards()[0].version()
    );
    println!("  parameters    {} in {} tensors", human_count(n_params), g.tensor_count());
    println!("  bits/weight   {:.2}", g.tensor_bytes_total() as f64 * 8.0 / n_params.max(1) as f64);
    match infr_models::load_model(&w) {
        Ok(m) => {
            println!(
                "  runnable      yes: {} layers, width {}, context {}, vocab {}",
                m.info.n_layer, m.info.n_embd, m.info.n_ctx_train, m.info.n_vocab
            );
            if m.info.n_expert > 0 {
                println!("  experts       {} per MoE layer, {} used per token", m.info.n_expert, m.info.n_expert_used);
            }
        }
        Err(e) => println!("  runnable      no: {e}"),
    }

    println!("\nmetadata ({} keys)", meta.len());
    for (k, v) in meta.iter() {
        if k == "tokenizer.chat_template" {
            continue;
        }
        let shown = match v {
            Value::Array(_, items) if !a.full && items.len() > 8 => format!("{v}"),
            _ if a.full => format!("{v:?}"),
            _ => format!("{v}"),
        };
        println!("  {k:<44} {shown}");
    }

    let mut by_type: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for t in g.tensors() {
        let e = by_type.entry(t.info.ty.to_string()).or_default();
        e.0 += 1;
        e.1 += t.info.size;
    }
    println!("\ntensors by type");
    for (ty, (n, bytes)) in &by_type {
        println!("  {ty:<8} {n:>5} tensors  {:>12}", human_bytes(*bytes));
    }
    println!("\ntensors{}", if a.tensors { "" } else { " (first 12; --tensors for all)" });
    for t in g.tensors().take(if a.tensors { usize::MAX } else { 12 }) {
        let dims: Vec<String> = t.info.dims.iter().map(|d| d.to_string()).collect();
        println!("  {:<40} {:<8} [{}]", t.info.name, t.info.ty, dims.join(", "));
    }

    println!("\ntokenizer");
    match load::tokenizer(&w) {
        Ok(tok) => println!("  {}", tok.summary()),
        Err(e) => println!("  unavailable: {e}"),
    }

    println!("\nchat template");
    match meta.str("tokenizer.chat_template")? {
        None => println!("  (none in this file)"),
        Some(t) if a.template => println!("{t}"),
        Some(t) => {
            let lines: Vec<&str> = t.lines().collect();
            for l in lines.iter().take(10) {
                println!("  | {l}");
            }
            if lines.len() > 10 {
                println!("  | ... {} more lines (--template to show all)", lines.len() - 10);
            }
        }
    }
    Ok(())
}
