//! Writing GGUF v3 files (for `infr synth`, tests and tools).

use std::io::Write;
use std::path::Path;

use infr_quant::GgmlType;

use crate::value::write_string;
use crate::{GgufError, Metadata, Value, DEFAULT_ALIGNMENT, GGUF_MAGIC};

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes a GGUF v3 file that llama.cpp can load.
pub struct GgufWriter {
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
    alignment: u64,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    /// An empty file with the default alignment.
    pub fn new() -> Self {
        Self { metadata: Metadata::new(), tensors: Vec::new(), alignment: DEFAULT_ALIGNMENT }
    }

    /// Set a metadata key (insertion order is kept).
    pub fn set(&mut self, key: &str, value: Value) -> &mut Self {
        if key == "general.alignment" {
            if let Some(a) = value.as_u64().filter(|a| a.is_power_of_two()) {
                self.alignment = a;
            }
        }
        self.metadata.insert(key, value);
        self
    }

    /// Add a tensor; `dims` in ggml order, `data` already encoded in `ty`.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufError> {
        let n: u64 = dims.iter().product();
        let expected = ty.row_bytes(dims[0] as usize).map(|r| r as u64 * (n / dims[0]));
        if expected != Some(data.len() as u64) {
            return Err(GgufError::BadShape {
                name: name.into(),
                dims: dims.to_vec(),
                why: format!("{} bytes of {ty} data do not fit this shape", data.len()),
            });
        }
        self.tensors.push(PendingTensor { name: name.into(), dims: dims.to_vec(), ty, data });
        Ok(self)
    }

    /// Encode the whole file in memory.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in self.metadata.iter() {
            write_string(&mut out, k);
            out.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            v.write(&mut out);
        }
        let align = |x: u64| x.div_ceil(self.alignment) * self.alignment;
        let mut offset = 0u64;
        for t in &self.tensors {
            write_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offset = align(offset + t.data.len() as u64);
        }
        out.resize(align(out.len() as u64) as usize, 0);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(align(out.len() as u64) as usize, 0);
        }
        out
    }

    /// Write the file to `path` (via a temporary file renamed into place).
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_owned(), source };
        let tmp = path.with_extension("gguf.tmp");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).map_err(io)?);
        f.write_all(&self.to_bytes()).map_err(io)?;
        f.flush().map_err(io)?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io)
    }
}
