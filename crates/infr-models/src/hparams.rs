//! Hyper-parameters shared by the transformer families, read like llama.cpp's
//! `llama_model::load_hparams` (keys are prefixed with the architecture name).

use infr_gguf::{Metadata, Value};

use crate::ModelError;

/// How RoPE frequencies are scaled for context extension (`rope.scaling.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeScalingType {
    None,
    Linear,
    Yarn,
    LongRope,
}

/// The common hyper-parameters. Per-layer values are expanded to one entry per layer.
#[derive(Debug, Clone)]
pub struct Hparams {
    /// `general.architecture`.
    pub arch: String,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: Vec<usize>,
    pub n_head_kv: Vec<usize>,
    pub n_ff: Vec<usize>,
    /// Training context length.
    pub n_ctx_train: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    pub n_rot: usize,
    pub rope_freq_base: f32,
    /// `1 / rope.scaling.factor` (1 = unscaled).
    pub rope_freq_scale: f32,
    pub rope_scaling: RopeScalingType,
    pub n_ctx_orig_yarn: usize,
    pub rms_eps: f32,
    /// Vocabulary size (from the tokenizer tokens or `vocab_size`).
    pub n_vocab: usize,
}

/// Upper bounds that keep a hostile file from asking for absurd graphs.
const MAX_LAYERS: usize = 1024;
const MAX_WIDTH: usize = 1 << 20;

/// Reads `{arch}.key` values from metadata with typed errors.
pub struct Keys<'a> {
    pub meta: &'a Metadata,
    pub arch: &'a str,
}

impl<'a> Keys<'a> {
    /// Full key name for an architecture-relative key.
    pub fn name(&self, key: &str) -> String {
        format!("{}.{key}", self.arch)
    }

    /// An optional unsigned integer.
    pub fn u(&self, key: &str) -> Result<Option<usize>, ModelError> {
        Ok(self.meta.u64(&self.name(key))?.map(|v| v as usize))
    }

    /// A required unsigned integer.
    pub fn req_u(&self, key: &str) -> Result<usize, ModelError> {
        self.u(key)?.ok_or_else(|| ModelError::BadHparam(format!("{} is missing", self.name(key))))
    }

    /// An optional float.
    pub fn f(&self, key: &str) -> Result<Option<f32>, ModelError> {
        Ok(self.meta.f64(&self.name(key))?.map(|v| v as f32))
    }

    /// An optional string.
    pub fn s(&self, key: &str) -> Result<Option<&'a str>, ModelError> {
        Ok(self.meta.str(&self.name(key))?)
    }

    /// A value that is either a scalar or a per-layer array (`get_key_or_arr`).
    pub fn per_layer(&self, key: &str, n_layer: usize) -> Result<Option<Vec<usize>>, ModelError> {
        let name = self.name(key);
        match self.meta.get(&name) {
            None => Ok(None),
            Some(Value::Array(_, items)) => {
                if items.len() != n_layer {
                    return Err(ModelError::BadHparam(format!(
                        "{name} has {} entries for {n_layer} layers",
                        items.len()
                    )));
                }
                items
                    .iter()
                    .map(|v| {
                        v.as_u64()
                            .map(|x| x as usize)
                            .ok_or_else(|| ModelError::BadHparam(format!("{name}: not an integer")))
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(v) => {
                let x = v.as_u64().ok_or_else(|| ModelError::BadHparam(format!("{name}: not an integer")))?;
                Ok(Some(vec![x as usize; n_layer]))
            }
        }
    }

    /// A per-layer boolean array.
    pub fn bool_array(&self, key: &str) -> Result<Option<Vec<bool>>, ModelError> {
        let name = self.name(key);
        match self.meta.get(&name) {
            None => Ok(None),
            Some(Value::Array(_, items)) => items
                .iter()
                .map(|v| v.as_bool().or_else(|| v.as_i64().map(|x| x != 0)))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| ModelError::BadHparam(format!("{name}: not a bool array"))),
            Some(_) => Err(ModelError::BadHparam(format!("{name}: expected an array"))),
        }
    }
}

impl Hparams {
    /// Read the common hyper-parameters of architecture `arch`.
    pub fn read(meta: &Metadata) -> Result<Self, ModelError> {
        let arch = meta.require_str("general.architecture")?.to_owned();
        let k = Keys { meta, arch: &arch };
        let n_embd = k.req_u("embedding_length")?;
        let n_layer = k.req_u("block_count")?;
        if n_layer == 0 || n_layer > MAX_LAYERS {
            return Err(ModelError::BadHparam(format!("block_count = {n_layer}")));
        }
        if n_embd == 0 || n_embd > MAX_WIDTH {
            return Err(ModelError::BadHparam(format!("embedding_length = {n_embd}")));
        }
        let n_head = k.per_layer("attention.head_count", n_layer)?.unwrap_or_else(|| vec![0; n_layer]);
        let n_head_kv = k.per_layer("attention.head_count_kv", n_layer)?.unwrap_or_else(|| n_head.clone());
        let n_ff = k.per_layer("feed_forward_length", n_layer)?.unwrap_or_else(|| vec![0; n_layer]);
        let n_ctx_train = k.u("context_length")?.unwrap_or(2048);
        let h0 = n_head[0].max(1);
        let head_dim_k = k.u("attention.key_length")?.unwrap_or(n_embd / h0);
        let head_dim_v = k.u("attention.value_length")?.unwrap_or(n_embd / h0);
        let n_rot = k.u("rope.dimension_count")?.unwrap_or(head_dim_k);
        let rope_freq_base = k.f("rope.freq_base")?.unwrap_or(10000.0);
        let scale = match k.f("rope.scaling.factor")? {
            Some(f) => f,
            None => k.f("rope.scale_linear")?.unwrap_or(0.0),
        };
        let rope_freq_scale = if scale == 0.0 { 1.0 } else { 1.0 / scale };
        let rope_scaling = match k.s("rope.scaling.type")?.unwrap_or("linear") {
            "none" => RopeScalingType::None,
            "linear" => RopeScalingType::Linear,
            "yarn" => RopeScalingType::Yarn,
            "longrope" => RopeScalingType::LongRope,
            other => return Err(ModelError::BadHparam(format!("unknown rope.scaling.type '{other}'"))),
        };
        let n_ctx_orig_yarn = k.u("rope.scaling.original_context_length")?.unwrap_or(n_ctx_train);
        let rms_eps = k.f("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-5);
        let n_vocab = match meta.array("tokenizer.ggml.tokens")? {
            Some(t) => t.len(),
            None => k.u("vocab_size")?.unwrap_or(0),
        };
        for (what, v) in [("head_dim_k", head_dim_k), ("head_dim_v", head_dim_v), ("n_rot", n_rot)] {
            if v > MAX_WIDTH {
                return Err(ModelError::BadHparam(format!("{what} = {v}")));
            }
        }
        for il in 0..n_layer {
            if n_head[il] > MAX_WIDTH || n_ff[il] > MAX_WIDTH * 16 {
                return Err(ModelError::BadHparam(format!("layer {il}: head count or FFN width out of range")));
            }
            if n_head_kv[il] > 0 && n_head[il] % n_head_kv[il] != 0 {
                return Err(ModelError::BadHparam(format!(
                    "layer {il}: {} heads is not a multiple of {} KV heads",
                    n_head[il], n_head_kv[il]
                )));
            }
        }
        // Corrupt but parseable values would load and then generate garbage or nothing.
        if !(rms_eps.is_finite() && rms_eps > 0.0) {
            return Err(ModelError::BadHparam(format!(
                "{} = {rms_eps} (must be a positive number)",
                k.name("attention.layer_norm_rms_epsilon")
            )));
        }
        if !(rope_freq_base.is_finite() && rope_freq_base > 0.0) {
            return Err(ModelError::BadHparam(format!(
                "{} = {rope_freq_base} (must be a positive number)",
                k.name("rope.freq_base")
            )));
        }
        if !(rope_freq_scale.is_finite() && rope_freq_scale > 0.0) {
            return Err(ModelError::BadHparam(format!(
                "{} gives a RoPE frequency scale of {rope_freq_scale} (must be a positive number)",
                k.name("rope.scaling.factor")
            )));
        }
        if n_rot > head_dim_k || n_rot % 2 != 0 {
            return Err(ModelError::BadHparam(format!("rope.dimension_count = {n_rot} with head dim {head_dim_k}")));
        }
        Ok(Self {
            arch,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            n_ff,
            n_ctx_train,
            head_dim_k,
            head_dim_v,
            n_rot,
            rope_freq_base,
            rope_freq_scale,
            rope_scaling,
            n_ctx_orig_yarn,
            rms_eps,
            n_vocab,
        })
    }

    /// Keys of this model's architecture.
    pub fn keys<'a>(&'a self, meta: &'a Metadata) -> Keys<'a> {
        Keys { meta, arch: &self.arch }
    }

    /// Require that every layer has attention heads (transformer families).
    pub fn require_heads(&self) -> Result<(), ModelError> {
        if self.n_head.contains(&0) || self.n_head_kv.contains(&0) {
            return Err(ModelError::BadHparam(format!("{}.attention.head_count is missing or zero", self.arch)));
        }
        if self.n_vocab == 0 {
            return Err(ModelError::BadHparam("vocabulary size unknown".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(extra: &[(&str, Value)]) -> Metadata {
        let mut m = Metadata::new();
        m.insert("general.architecture", Value::String("llama".into()));
        m.insert("llama.embedding_length", Value::U32(64));
        m.insert("llama.block_count", Value::U32(2));
        m.insert("llama.attention.head_count", Value::U32(4));
        m.insert("llama.vocab_size", Value::U32(100));
        for (k, v) in extra {
            m.insert(*k, v.clone());
        }
        m
    }

    /// Hardening issue, defect 12: corrupt but parseable hyper-parameters are refused at load,
    /// naming the key, instead of loading a model that generates nothing.
    #[test]
    fn corrupt_hyper_parameters_are_refused() {
        assert!(Hparams::read(&meta(&[])).is_ok());
        let cases = [
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(f32::NAN)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(-1e-5)),
            ("llama.attention.layer_norm_rms_epsilon", Value::F32(f32::INFINITY)),
            ("llama.rope.freq_base", Value::F32(0.0)),
            ("llama.rope.freq_base", Value::F32(f32::NAN)),
            ("llama.rope.scaling.factor", Value::F32(f32::INFINITY)),
        ];
        for (key, v) in cases {
            let err = Hparams::read(&meta(&[(key, v.clone())])).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(key), "{key} = {v:?}: {err:?}");
        }
    }
}
