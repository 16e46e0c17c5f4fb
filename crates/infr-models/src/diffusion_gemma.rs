//! DiffusionGemma (`diffusion-gemma`): block text diffusion on the Gemma 4 26B-A4B text stack,
//! after transformers' `models/diffusion_gemma` (5.24). No llama.cpp implements it; the GGUF
//! layout is ours (`testdata/diffusion/README.md`): the `gemma4` tensors and keys under the
//! `diffusion-gemma` prefix, plus
//!
//! - `diffusion.*` keys: the canvas length and the sampler defaults;
//! - `dec.blk.N.layer_output_scale.weight`: the decoder's own layer scalars (every other
//!   decoder weight is the encoder's, as transformers ties them);
//! - `self_cond.{norm,ffn_gate,ffn_up,ffn_down}.weight`: the self-conditioning block.
//!
//! The encoder is the causal Gemma 4 model and writes the prompt's KV cache ([`Architecture::build`]).
//! The decoder ([`Architecture::build_denoiser`]) embeds the canvas, adds the self-conditioning
//! signal — `GeGLU(rms_norm(probs @ embed * sqrt(n_embd)))` of the previous step's
//! probabilities, then a weightless RMS norm (`DiffusionGemmaSelfConditioning`) — and runs the
//! same layers with bidirectional attention over [cached prompt | canvas], logits for every row.

use infr_core::{Activation, GraphBuilder, KvLayerSpec, WeightSource};

use crate::builders::GatedFfn;
use crate::gemma4::{self, Gemma4, Pass};
use crate::{Architecture, DiffusionParams, Hparams, ModelError, TensorLoader};

#[derive(Debug)]
struct DiffusionGemma {
    stack: Gemma4,
    /// The decoder's per-layer output scales.
    dec_scales: Vec<Option<f32>>,
    sc_norm: infr_core::WeightId,
    sc_ffn: GatedFfn,
    params: DiffusionParams,
}

/// Loader for `general.architecture = diffusion-gemma`.
pub(crate) fn load(
    hp: &Hparams,
    src: &dyn WeightSource,
    tl: &mut TensorLoader<'_>,
) -> Result<Box<dyn Architecture>, ModelError> {
    // The reference implementation is transformers: GELU in f32, not through ggml's f16 table.
    let stack = gemma4::load_stack(hp, src, tl, Activation::GeluTanhExact)?;
    let keys = hp.keys(src.metadata());
    // transformers' generation defaults (`_get_default_generation_params`) where a file is silent.
    let params = DiffusionParams {
        canvas_length: keys.u("diffusion.canvas_length")?.unwrap_or(256),
        max_denoising_steps: keys.u("diffusion.max_denoising_steps")?.unwrap_or(48),
        t_min: keys.f("diffusion.t_min")?.unwrap_or(0.4),
        t_max: keys.f("diffusion.t_max")?.unwrap_or(0.8),
        entropy_bound: keys.f("diffusion.entropy_bound")?.unwrap_or(0.1),
        stability_threshold: keys.u("diffusion.stability_threshold")?.unwrap_or(1),
        confidence_threshold: keys.f("diffusion.confidence_threshold")?.unwrap_or(0.005),
    };
    let p = &params;
    if p.canvas_length == 0 || p.max_denoising_steps == 0 {
        return Err(ModelError::BadHparam("diffusion canvas length and steps must be positive".into()));
    }
    let in_range = p.t_min >= 0.0 && p.t_max > p.t_min && p.entropy_bound > 0.0 && p.confidence_threshold > 0.0;
    if !in_range {
        return Err(ModelError::BadHparam(format!(
            "diffusion sampler settings out of range: t_min {} t_max {} entropy bound {} confidence {}",
            p.t_min, p.t_max, p.entropy_bound, p.confidence_threshold
        )));
    }
    let mut dec_scales = Vec::with_capacity(hp.n_layer);
    for il in 0..hp.n_layer {
        dec_scales.push(gemma4::scalar(src, &format!("dec.blk.{il}.layer_output_scale.weight"))?);
    }
    let (e, f) = (hp.n_embd, hp.n_ff[0]);
    let sc_ffn = GatedFfn {
        gate: tl.require("self_cond.ffn_gate.weight", &[e, f])?,
        up: tl.require("self_cond.ffn_up.weight", &[e, f])?,
        down: tl.require("self_cond.ffn_down.weight", &[f, e])?,
        act: Activation::GeluTanhExact,
    };
    let sc_norm = tl.require("self_cond.norm.weight", &[e])?;
    Ok(Box::new(DiffusionGemma { stack, dec_scales, sc_norm, sc_ffn, params }))
}

impl Architecture for DiffusionGemma {
    fn build(&self, g: &mut GraphBuilder<'_>) {
        self.stack.build(g);
    }

    fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.stack.kv_layers()
    }

    fn diffusion(&self) -> Option<DiffusionParams> {
        Some(self.params)
    }

    fn build_denoiser(&self, g: &mut GraphBuilder<'_>) {
        let (e, eps) = (self.stack.n_embd(), self.stack.eps());
        let x = self.stack.embed(g);
        g.set_label("self_cond");
        let soft = g.mix_embed(self.stack.tok_embd());
        let soft = g.scale(soft, (e as f32).sqrt());
        let h = g.rms_norm(soft, Some(self.sc_norm), eps, e);
        let signal = self.sc_ffn.build(g, h);
        let x = g.add(x, signal);
        let x = g.rms_norm(x, None, eps, e);
        let x = self.stack.layers(g, x, Pass::Denoise { out_scales: &self.dec_scales });
        self.stack.logits(g, x);
    }
}
