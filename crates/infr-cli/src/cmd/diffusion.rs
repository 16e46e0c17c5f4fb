//! Block-diffusion generation for the commands (DiffusionGemma): the settings flags, a reply
//! printed canvas by canvas (or redrawn at every denoising step with `--diffusion-visual`), and
//! the statistics line.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use infr_engine::{generate_diffusion, DiffusionEvent, DiffusionOptions, DiffusionOutput, Runner, SeededNoise, SeqId};
use infr_models::DiffusionParams;
use infr_tokenizer::Tokenizer;

/// Flags of a diffusion model (ignored by autoregressive ones).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct DiffusionArgs {
    /// Diffusion models: redraw the canvas at every denoising step (on a terminal; otherwise
    /// one line per step).
    #[arg(long)]
    pub diffusion_visual: bool,
    /// Diffusion models: most denoising steps per canvas (default: the model's, 48 for
    /// DiffusionGemma).
    #[arg(long)]
    pub diffusion_steps: Option<usize>,
    /// Diffusion models: the entropy-bound sampler's bound (default: the model's, 0.1); higher
    /// accepts more tokens per step (fewer steps, less care).
    #[arg(long)]
    pub diffusion_entropy_bound: Option<f32>,
}

impl DiffusionArgs {
    /// The model's settings with these flags on top.
    pub fn params(&self, model: DiffusionParams) -> Result<DiffusionParams> {
        let mut p = model;
        if let Some(s) = self.diffusion_steps {
            anyhow::ensure!(s > 0, "--diffusion-steps must be positive");
            p.max_denoising_steps = s;
        }
        if let Some(b) = self.diffusion_entropy_bound {
            anyhow::ensure!(b > 0.0 && b.is_finite(), "--diffusion-entropy-bound must be positive");
            p.entropy_bound = b;
        }
        Ok(p)
    }
}

/// What [`reply`] needs besides the runner.
pub struct Reply<'a> {
    pub tok: &'a Tokenizer,
    pub params: DiffusionParams,
    pub max_new_tokens: usize,
    pub seed: Option<u64>,
    pub visual: bool,
}

/// Generate after `prompt` (the sequence is emptied first) and print the text as canvases
/// are committed; `stop()` is polled at every step. Returns the text and the output.
pub fn reply(
    runner: &mut Runner,
    seq: SeqId,
    prompt: &[u32],
    r: &Reply<'_>,
    stop: &dyn Fn() -> bool,
) -> Result<(String, DiffusionOutput)> {
    runner.truncate(seq, 0)?;
    let opts = DiffusionOptions { params: r.params, max_new_tokens: r.max_new_tokens, eos: r.tok.eog_ids().to_vec() };
    let mut noise = SeededNoise::from_seed_or_clock(r.seed);
    let mut out = std::io::stdout().lock();
    let redraw = r.visual && std::io::stdout().is_terminal();
    let mut committed: Vec<u32> = Vec::new();
    let mut text = String::new();
    // The visual mode redraws the canvas after the committed text: save the cursor there.
    if redraw {
        let _ = write!(out, "\x1b[s");
    }
    let result = generate_diffusion(runner, seq, prompt, &opts, &mut noise, |ev| {
        match ev {
            DiffusionEvent::Step(st) if r.visual => {
                let accepted = st.accepted.iter().filter(|&&a| a).count();
                let draft = r.tok.decode(st.argmax);
                if redraw {
                    // Back to the end of the committed text, clear below, print the draft.
                    let _ = write!(
                        out,
                        "\x1b[u\x1b[J\x1b[2m{}\x1b[0m\n\x1b[2m[canvas {} step {} | {accepted} accepted]\x1b[0m",
                        draft.replace('\n', "⏎"),
                        st.block + 1,
                        st.step + 1
                    );
                } else {
                    let _ =
                        write!(out, "\n[canvas {} step {}: {accepted} accepted] {draft:?}", st.block + 1, st.step + 1);
                }
                let _ = out.flush();
            }
            DiffusionEvent::Step(_) => {}
            DiffusionEvent::Block { tokens, .. } => {
                // Decode the whole text so far, so a character split across canvases prints whole.
                let before = text.len();
                committed.extend(tokens.iter().filter(|t| !r.tok.eog_ids().contains(t)));
                text = r.tok.decode(&committed);
                if redraw {
                    let _ = write!(out, "\x1b[u\x1b[J");
                }
                let _ = write!(out, "{}", text.get(before..).unwrap_or_default());
                if redraw {
                    let _ = write!(out, "\x1b[s");
                }
                let _ = out.flush();
            }
        }
        !stop()
    });
    let _ = writeln!(out);
    Ok((text, result?))
}

/// The statistics line of a diffusion reply.
pub fn print_stats(prompt_tokens: usize, o: &DiffusionOutput) {
    let steps: usize = o.steps.iter().sum();
    let per = |x: f64, secs: f64| if secs > 0.0 { x / secs } else { 0.0 };
    eprintln!(
        "[prompt {prompt_tokens} tokens {:.1} t/s | generated {} tokens {:.1} t/s | {} canvases, {:.1} steps per canvas, {:.2} tokens per step{}]",
        per(prompt_tokens as f64, o.prompt_secs),
        o.tokens.len(),
        per(o.tokens.len() as f64, o.gen_secs),
        o.steps.len(),
        steps as f64 / o.steps.len().max(1) as f64,
        o.tokens.len() as f64 / steps.max(1) as f64,
        if o.hit_eos { " | end of sequence" } else { "" }
    );
}
