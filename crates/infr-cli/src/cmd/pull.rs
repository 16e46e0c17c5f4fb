//! `infr pull`: download a model into the shared Hugging Face hub cache.

use anyhow::{Context, Result};

/// Arguments of `infr pull`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `org/repo[:quant]` (default quant Q4_K_M), `org/repo:file.gguf`, `hf:` prefixes, `@revision`.
    pub model: String,
    /// Resolve from the local cache only (also `HF_HUB_OFFLINE=1`).
    #[arg(long)]
    pub offline: bool,
    /// Hub endpoint or mirror (also `HF_ENDPOINT`).
    #[arg(long)]
    pub endpoint: Option<String>,
}

/// Run `infr pull`: prints the local path of every file (all shards) when done.
pub fn run(a: Args) -> Result<()> {
    let mut opts = infr_hub::HubOptions::from_env();
    if a.offline {
        opts = opts.with_offline(true);
    }
    if let Some(e) = a.endpoint {
        opts = opts.with_endpoint(e);
    }
    let resolved = infr_hub::resolve_blocking(&a.model, opts).with_context(|| format!("pulling '{}'", a.model))?;
    if let Some(repo) = &resolved.repo {
        let commit = resolved.commit.as_deref().unwrap_or("?");
        eprintln!("{repo} @ {commit}");
    }
    for p in &resolved.paths {
        println!("{}", p.display());
    }
    Ok(())
}
