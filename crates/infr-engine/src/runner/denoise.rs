//! Denoising steps of a diffusion model (DiffusionGemma): a canvas refined over the cached
//! tokens without committing, its rows sampled on the device where the backend can.

use infr_core::{BackendError, CanvasSampleInputs, PlanId, SeqPages, StepInputs};

use super::Runner;
use crate::{EngineError, SeqId};

/// One sampled denoising step: per canvas row, the entropy at the step's temperature, the
/// argmax and the token drawn (see [`Runner::denoise_sampled`]).
#[derive(Debug, Clone, Default)]
pub struct CanvasDraws {
    pub entropy: Vec<f64>,
    pub argmax: Vec<u32>,
    pub samples: Vec<u32>,
}

impl Runner {
    /// The denoiser plan of canvases of `n` tokens, built on first use.
    pub(super) fn denoise_plan(&mut self, n: usize) -> Result<PlanId, EngineError> {
        if let Some(&p) = self.denoise_plans.get(&n) {
            return Ok(p);
        }
        let graph = self
            .model
            .denoiser_graph(n)
            .ok_or_else(|| EngineError::Invalid(format!("{} is not a diffusion model", self.model.info.arch)))?;
        let p = self.backend.compile(&graph)?;
        self.denoise_plans.insert(n, p);
        self.plans_built += 1;
        Ok(p)
    }

    /// One denoising step of a diffusion model: the logits of every row of `canvas`, refined
    /// bidirectionally over the sequence's cached tokens at the positions that follow them.
    /// `mix` is the previous step's probabilities (`canvas.len()` rows of `n_vocab`), or empty
    /// on a canvas's first step. Nothing is committed: the canvas's K/V land in the positions
    /// after the sequence's tokens, which the next committed step overwrites.
    pub fn denoise(&mut self, seq: SeqId, canvas: &[u32], mix: &[f32]) -> Result<Vec<f32>, EngineError> {
        self.run_denoise(seq, canvas, mix, |b, plan, inputs| b.execute(plan, inputs))
    }

    /// A denoising step sampled as DiffusionGemma's sampler does (`crate::diffusion`): each
    /// row's softmax at `temperature`, its entropy and argmax, and one draw per row with the
    /// row's uniform. A step after the first of a canvas (`first_step` false) is conditioned
    /// on the previous step's probabilities, which stay where they were computed: on a
    /// backend with a device sampler only the draws cross the bus; elsewhere the runner keeps
    /// them on the host.
    pub fn denoise_sampled(
        &mut self,
        seq: SeqId,
        canvas: &[u32],
        temperature: f32,
        uniforms: &[f64],
        first_step: bool,
    ) -> Result<CanvasDraws, EngineError> {
        if uniforms.len() != canvas.len() {
            return Err(EngineError::Invalid(format!("{} uniforms for {} canvas rows", uniforms.len(), canvas.len())));
        }
        if self.backend.canvas_sampler() {
            let u: Vec<f32> = uniforms.iter().map(|&u| u as f32).collect();
            let s = CanvasSampleInputs { temperature, uniforms: &u, reuse_mix: !first_step };
            let draws =
                self.run_denoise(seq, canvas, &[], |b, plan, inputs| b.execute_canvas_sample(plan, inputs, &s))?;
            return Ok(CanvasDraws {
                entropy: draws.iter().map(|d| d.entropy as f64).collect(),
                argmax: draws.iter().map(|d| d.argmax).collect(),
                samples: draws.iter().map(|d| d.sample).collect(),
            });
        }
        let mix = if first_step { Vec::new() } else { std::mem::take(&mut self.canvas_mix) };
        let logits = self.denoise(seq, canvas, &mix)?;
        let v = self.n_vocab();
        let (probs, entropy, argmax) = crate::diffusion::canvas_stats(&logits, temperature, v);
        let samples = crate::diffusion::draw_rows(&probs, v, uniforms);
        self.canvas_mix = probs;
        Ok(CanvasDraws { entropy, argmax, samples })
    }

    /// Check a canvas, reserve its positions and run `run` on the denoiser plan with the
    /// canvas's step inputs.
    fn run_denoise<T>(
        &mut self,
        seq: SeqId,
        canvas: &[u32],
        mix: &[f32],
        run: impl FnOnce(&mut dyn infr_core::Backend, PlanId, &StepInputs<'_>) -> Result<T, BackendError>,
    ) -> Result<T, EngineError> {
        let n = canvas.len();
        if n == 0 {
            return Err(EngineError::Invalid("an empty canvas".into()));
        }
        // The windowed layers' ring holds one step beyond the window.
        if n > self.opts.ubatch {
            return Err(EngineError::Invalid(format!(
                "a canvas of {n} tokens exceeds the ubatch of {}",
                self.opts.ubatch
            )));
        }
        if !mix.is_empty() && mix.len() != n * self.n_vocab() {
            return Err(EngineError::Invalid(format!("a mixture of {} values for {n} canvas rows", mix.len())));
        }
        self.reserve(seq, n)?;
        let plan = self.denoise_plan(n)?;
        let s = &self.seqs[&seq];
        let start = s.tokens.len() as u32;
        let positions: Vec<u32> = (start..start + n as u32).collect();
        let rows: Vec<u32> = (0..n as u32).collect();
        let seqs = [SeqPages { pages: &s.pages, window_pages: &s.window_pages, state_slot: s.state_slot.unwrap_or(0) }];
        let inputs = StepInputs {
            tokens: canvas,
            positions: &positions,
            token_seq: &vec![0; n],
            seqs: &seqs,
            output_rows: &rows,
            embed_mix: mix,
            hidden: &[],
        };
        Ok(run(self.backend.as_mut(), plan, &inputs)?)
    }
}
