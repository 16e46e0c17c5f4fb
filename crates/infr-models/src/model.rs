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
