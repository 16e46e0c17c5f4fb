//! Where weights come from: the `WeightSource` trait and its GGUF implementation.

use std::path::Path;

use infr_gguf::{GgufError, GgufModel, Metadata, TensorData};
use infr_quant::GgmlType;

/// Type and shape of a stored tensor (ggml order: `dims[0]` is contiguous).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightInfo {
    pub ty: GgmlType,
    pub dims: Vec<usize>,
}

impl WeightInfo {
    /// Bytes of the tensor in its GGUF blocks (0 where the shape is not block aligned).
    pub fn bytes(&self) -> u64 {
        let cols = self.dims.first().copied().unwrap_or(0);
        let rows: u64 = self.dims.iter().skip(1).map(|&d| d as u64).product();
        self.ty.row_bytes(cols).map_or(0, |b| b as u64 * rows)
    }
}

/// A weight ready to upload: name, type, shape and its bytes in ggml block format.
#[derive(Debug, Clone)]
pub struct WeightData {
    pub name: String,
    pub info: WeightInfo,
    pub bytes: TensorData,
}

/// A store of named tensors plus GGUF-style metadata (GGUF now, safetensors later).
pub trait WeightSource: Send + Sync {
    /// Model metadata (hyper-parameters, tokenizer).
    fn metadata(&self) -> &Metadata;
    /// Type and shape of a tensor, if present.
    fn info(&self, name: &str) -> Option<WeightInfo>;
    /// The tensor's bytes.
    fn data(&self, name: &str) -> Option<WeightData>;
    /// All tensor names.
    fn names(&self) -> Vec<String>;
}

/// A GGUF model (one file or split shards) as a weight source.
#[derive(Debug, Clone)]
pub struct GgufWeights {
    model: GgufModel,
}

impl GgufWeights {
    /// Open a GGUF file (a first shard pulls in the others).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        Ok(Self { model: GgufModel::open(path)? })
    }

    /// Wrap an already opened model.
    pub fn new(model: GgufModel) -> Self {
        Self { model }
    }

    /// The underlying GGUF model.
    pub fn gguf(&self) -> &GgufModel {
        &self.model
    }
}

impl WeightSource for GgufWeights {
    fn metadata(&self) -> &Metadata {
        self.model.metadata()
    }

    fn info(&self, name: &str) -> Option<WeightInfo> {
        let t = self.model.tensor(name)?;
        Some(WeightInfo { ty: t.info.ty, dims: t.info.dims.iter().map(|&d| d as usize).collect() })
    }

    fn data(&self, name: &str) -> Option<WeightData> {
        let info = self.info(name)?;
        Some(WeightData { name: name.to_owned(), info, bytes: self.model.tensor_data(name)? })
    }

    fn names(&self) -> Vec<String> {
        self.model.tensors().map(|t| t.info.name.clone()).collect()
    }
}
