//! A loaded model: its architecture, hyper-parameters and weight table.

use infr_core::{Graph, GraphBuilder, KvLayerSpec, StateLayerSpec, WeightSource};

use crate::{Hparams, ModelWeights};

/// What an architecture file provides once its hyper-parameters and tensors are loaded.
pub trait Architecture: Send + Sync + std::fmt::Debug {
    /// Add the step graph's nodes; the last node added must be the logits of the output rows.
    fn build(&self, g: &mut GraphBuilder<'_>);
    /// Shape of the KV cache of each attention layer, in `kv_layer` order.
    fn kv_layers(&self) -> Vec<KvLayerSpec>;
    /// Per-sequence recurrent state layers, in the order the graph's ops name them.
    fn state_layers(&self) -> Vec<StateLayerSpec> {
        Vec::new()
    }
    /// For a block-diffusion model: its canvas and sampler settings (`None`: autoregressive).
    fn diffusion(&self) -> Option<DiffusionParams> {
        None
    }
    /// For a block-diffusion model, add the denoiser's nodes: the step's tokens are a canvas
    /// refined bidirectionally over the cached prompt (`StepInputs::embed_mix` carries the
    /// previous step's probabilities); the last node is the logits of every row.
    fn build_denoiser(&self, g: &mut GraphBuilder<'_>) {
        let _ = g;
        unreachable!("only diffusion models build a denoiser")
    }
}

/// Block-diffusion settings a model file carries (DiffusionGemma: the canvas length from its
/// config, the rest from its `generation_config.json`, transformers 5.24 defaults otherwise).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiffusionParams {
    /// Tokens per canvas (block).
    pub canvas_length: usize,
    /// Most denoising steps per canvas.
    pub max_denoising_steps: usize,
    /// Temperature at the last step; the schedule is linear from `t_max` at the first.
    pub t_min: f32,
    pub t_max: f32,
    /// The entropy-bound sampler's bound on the summed entropy of the tokens it accepts.
    pub entropy_bound: f32,
    /// Steps the argmax canvas must repeat before a canvas may stop early (0: no requirement).
    pub stability_threshold: usize,
    /// Mean entropy of the scaled logits below which a stable canvas stops early.
    pub confidence_threshold: f32,
}

/// Summary facts about a model, for users and for the engine.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// `general.architecture`.
    pub arch: String,
    /// `general.name`, if present.
    pub name: Option<String>,
    pub n_vocab: usize,
    pub n_ctx_train: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    /// Experts per MoE layer and experts chosen per token (0 for a dense model).
    pub n_expert: usize,
    pub n_expert_used: usize,
}

/// A model ready to build graphs for.
#[derive(Debug)]
pub struct Model {
    pub info: ModelInfo,
    pub hparams: Hparams,
    pub weights: ModelWeights,
    pub(crate) arch: Box<dyn Architecture>,
}

impl Model {
    /// The graph of one step of `n_tokens` tokens producing `n_outputs` logit rows.
    pub fn graph(&self, n_tokens: usize, n_outputs: usize) -> Graph {
        let shape = |id| self.weights.info(id).dims.clone();
        let mut g = GraphBuilder::new(n_tokens, n_outputs, &shape);
        self.arch.build(&mut g);
        g.finish()
    }

    /// KV cache geometry.
    pub fn kv_layers(&self) -> Vec<KvLayerSpec> {
        self.arch.kv_layers()
    }

    /// Recurrent state geometry (empty for a pure transformer).
    pub fn state_layers(&self) -> Vec<StateLayerSpec> {
        self.arch.state_layers()
    }

    /// Block-diffusion settings, for a diffusion model.
    pub fn diffusion(&self) -> Option<DiffusionParams> {
        self.arch.diffusion()
    }

    /// The denoiser graph over a canvas of `n_tokens` (all rows output), for a diffusion model.
    pub fn denoiser_graph(&self, n_tokens: usize) -> Option<Graph> {
        self.arch.diffusion()?;
        let shape = |id| self.weights.info(id).dims.clone();
        let mut g = GraphBuilder::new(n_tokens, n_tokens, &shape);
        self.arch.build_denoiser(&mut g);
        Some(g.finish())
    }

    /// Read the summary from a source's metadata and hyper-parameters.
    pub(crate) fn info_from(src: &dyn WeightSource, hp: &Hparams) -> ModelInfo {
        ModelInfo {
            arch: hp.arch.clone(),
            name: src.metadata().str("general.name").ok().flatten().map(str::to_owned),
            n_vocab: hp.n_vocab,
            n_ctx_train: hp.n_ctx_train,
            n_embd: hp.n_embd,
            n_layer: hp.n_layer,
            n_expert: hp.keys(src.metadata()).u("expert_count").ok().flatten().unwrap_or(0),
            n_expert_used: hp.keys(src.metadata()).u("expert_used_count").ok().flatten().unwrap_or(0),
        }
    }
}
