//! The model's weight table: names → [`WeightId`], with shape checks at load time.

use std::collections::HashMap;

use infr_core::{WeightId, WeightInfo, WeightSource};

use crate::ModelError;

/// Every weight a model uses, in id order.
#[derive(Debug, Clone, Default)]
pub struct ModelWeights {
    names: Vec<String>,
    infos: Vec<WeightInfo>,
    index: HashMap<String, WeightId>,
}

impl ModelWeights {
    /// Number of weights.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Name of a weight.
    pub fn name(&self, id: WeightId) -> &str {
        &self.names[id.0 as usize]
    }

    /// Type and shape of a weight.
    pub fn info(&self, id: WeightId) -> &WeightInfo {
        &self.infos[id.0 as usize]
    }

    /// All `(id, name)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (WeightId, &str)> {
        self.names.iter().enumerate().map(|(i, n)| (WeightId(i as u32), n.as_str()))
    }

    /// Id of a weight by name.
    pub fn id(&self, name: &str) -> Option<WeightId> {
        self.index.get(name).copied()
    }
}

/// Collects the tensors an architecture asks for, checking each shape against what the
/// hyper-parameters imply (as llama.cpp's `create_tensor` does).
pub struct TensorLoader<'a> {
    src: &'a dyn WeightSource,
    weights: ModelWeights,
}

impl<'a> TensorLoader<'a> {
    /// Start loading from a source.
    pub fn new(src: &'a dyn WeightSource) -> Self {
        Self { src, weights: ModelWeights::default() }
    }

    /// A tensor that must exist with exactly `dims` (ggml order).
    pub fn require(&mut self, name: &str, dims: &[usize]) -> Result<WeightId, ModelError> {
        self.optional(name, dims)?.ok_or_else(|| ModelError::MissingTensor(name.to_owned()))
    }

    /// A tensor that may be absent; if present it must have `dims`.
    pub fn optional(&mut self, name: &str, dims: &[usize]) -> Result<Option<WeightId>, ModelError> {
        if let Some(&id) = self.weights.index.get(name) {
            return Ok(Some(id));
        }
        let Some(info) = self.src.info(name) else { return Ok(None) };
        // Trailing 1-dims are equivalent in ggml ({n} == {n, 1}).
        let trim = |d: &[usize]| {
            let mut v = d.to_vec();
            while v.len() > 1 && v.last() == Some(&1) {
                v.pop();
            }
            v
        };
        if trim(&info.dims) != trim(dims) {
            return Err(ModelError::WrongShape { name: name.to_owned(), got: info.dims, expected: dims.to_vec() });
        }
        let id = WeightId(self.weights.names.len() as u32);
        self.weights.names.push(name.to_owned());
        self.weights.infos.push(info);
        self.weights.index.insert(name.to_owned(), id);
        Ok(Some(id))
    }

    /// Whether the source has a tensor (without using it).
    pub fn has(&self, name: &str) -> bool {
        self.src.info(name).is_some()
    }

    /// The collected table.
    pub fn finish(self) -> ModelWeights {
        self.weights
    }
}
