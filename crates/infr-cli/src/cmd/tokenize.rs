//! `infr tokenize` and `infr detokenize`.

use anyhow::{Context, Result};

use crate::load;

/// Arguments of `infr tokenize`.
#[derive(clap::Args, Debug)]
pub struct TokenizeArgs {
    /// Model file.
    pub model: String,
    /// Text to tokenize.
    pub text: String,
    /// Treat special-token text (`<|im_start|>`…) as plain text.
    #[arg(long)]
    pub no_special: bool,
    /// Do not add BOS/EOS even when the model asks for them.
    #[arg(long)]
    pub no_bos: bool,
}

/// Arguments of `infr detokenize`.
#[derive(clap::Args, Debug)]
pub struct DetokenizeArgs {
    /// Model file.
    pub model: String,
    /// Token ids: a JSON array (`[1, 2]`) or comma/space separated.
    pub ids: String,
}

/// Run `infr tokenize`.
pub fn tokenize(a: TokenizeArgs) -> Result<()> {
    let w = load::open_weights(&a.model)?;
    let tok = load::tokenizer(&w)?;
    let ids = tok.encode(&a.text, !a.no_bos, !a.no_special);
    println!("{}", serde_json::to_string(&ids)?);
    Ok(())
}

/// Parse ids given as JSON or separated by commas/whitespace.
pub fn parse_ids(s: &str) -> Result<Vec<u32>> {
    let t = s.trim();
    if t.starts_with('[') {
        return serde_json::from_str(t).context("ids must be a JSON array of non-negative integers");
    }
    t.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().with_context(|| format!("'{p}' is not a token id")))
        .collect()
}

/// Run `infr detokenize`.
pub fn detokenize(a: DetokenizeArgs) -> Result<()> {
    let w = load::open_weights(&a.model)?;
    let tok = load::tokenizer(&w)?;
    let ids = parse_ids(&a.ids)?;
    if let Some(bad) = ids.iter().find(|&&i| i as usize >= tok.vocab_size()) {
        anyhow::bail!("token id {bad} is outside the vocabulary of {} tokens", tok.vocab_size());
    }
    println!("{}", tok.decode(&ids));
    Ok(())
}
