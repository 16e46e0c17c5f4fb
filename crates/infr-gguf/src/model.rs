//! A model made of one GGUF file or several split shards (`name-00001-of-00003.gguf`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::{GgufError, GgufFile, Metadata, TensorInfo};

/// A tensor of a model together with the shard that holds its bytes.
#[derive(Debug, Clone, Copy)]
pub struct TensorRef<'a> {
    /// Name, type, shape.
    pub info: &'a TensorInfo,
    /// The raw bytes.
    pub bytes: &'a [u8],
}

/// A whole model: every shard parsed, one tensor index over all of them.
/// Metadata comes from the first shard, as in llama.cpp.
#[derive(Debug, Clone)]
pub struct GgufModel {
    shards: Vec<GgufFile>,
    paths: Vec<PathBuf>,
    index: HashMap<String, (usize, usize)>,
}

/// If `path` names the first shard of a split model (`*-00001-of-000NN.gguf`), the paths of all
/// its shards; otherwise just `path`.
pub fn split_shard_paths(path: &Path) -> Vec<PathBuf> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if let Some((prefix, count)) = parse_split_name(name) {
        let dir = path.parent().unwrap_or(Path::new(""));
        return (1..=count).map(|i| dir.join(format!("{prefix}-{i:05}-of-{count:05}.gguf"))).collect();
    }
    vec![path.to_owned()]
}

/// `prefix-00001-of-00003.gguf` → `(prefix, 3)`, only for shard 1.
fn parse_split_name(name: &str) -> Option<(&str, usize)> {
    let stem = name.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 || no != "00001" {
        return None;
    }
    let count: usize = count.parse().ok()?;
    (count >= 1).then_some((prefix, count))
}

impl GgufModel {
    /// Open a model file; a first shard pulls in the others.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let paths = split_shard_paths(path.as_ref());
        let shards = paths.iter().map(GgufFile::open).collect::<Result<Vec<_>, _>>()?;
        Self::from_shards(shards, paths)
    }

    /// Build a model from already parsed shards, checking they belong together.
    pub fn from_shards(shards: Vec<GgufFile>, paths: Vec<PathBuf>) -> Result<Self, GgufError> {
        if shards.is_empty() {
            return Err(GgufError::BadSplit("no shards".into()));
        }
        let first = shards[0].metadata();
        if let Some(count) = first.u64("split.count")? {
            if count != shards.len() as u64 {
                return Err(GgufError::BadSplit(format!(
                    "split.count says {count} shards, found {} files",
                    shards.len()
                )));
            }
            for (i, s) in shards.iter().enumerate() {
                let no = s.metadata().u64("split.no")?;
                if no != Some(i as u64) {
                    return Err(GgufError::BadSplit(format!("shard {} has split.no = {no:?}", i + 1)));
                }
            }
        } else if shards.len() > 1 {
            return Err(GgufError::BadSplit("several files but no split.count".into()));
        }
        let mut index = HashMap::new();
        for (si, s) in shards.iter().enumerate() {
            for (ti, t) in s.tensors().iter().enumerate() {
                if index.insert(t.name.clone(), (si, ti)).is_some() {
                    return Err(GgufError::DuplicateTensor(t.name.clone()));
                }
            }
        }
        if let Some(total) = first.u64("split.tensors.count")? {
            if total != index.len() as u64 {
                return Err(GgufError::BadSplit(format!(
                    "split.tensors.count says {total} tensors, shards hold {}",
                    index.len()
                )));
            }
        }
        Ok(Self { shards, paths, index })
    }

    /// Model metadata (from the first shard).
    pub fn metadata(&self) -> &Metadata {
        self.shards[0].metadata()
    }

    /// The parsed shards.
    pub fn shards(&self) -> &[GgufFile] {
        &self.shards
    }

    /// Paths of the shards (empty entries for in-memory models).
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// All tensors of all shards, in shard then file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorRef<'_>> {
        self.shards
            .iter()
            .flat_map(|s| s.tensors().iter().map(move |t| TensorRef { info: t, bytes: s.tensor_bytes(t) }))
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.index.len()
    }

    /// A tensor by name.
    pub fn tensor(&self, name: &str) -> Option<TensorRef<'_>> {
        let &(si, ti) = self.index.get(name)?;
        let s = &self.shards[si];
        let info = &s.tensors()[ti];
        Some(TensorRef { info, bytes: s.tensor_bytes(info) })
    }

    /// A tensor's bytes as a shared handle (see [`crate::TensorData`]).
    pub fn tensor_data(&self, name: &str) -> Option<crate::TensorData> {
        let &(si, ti) = self.index.get(name)?;
        let s = &self.shards[si];
        Some(s.tensor_data(&s.tensors()[ti]))
    }

    /// Total bytes of tensor data.
    pub fn tensor_bytes_total(&self) -> u64 {
        self.tensors().map(|t| t.info.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names() {
        assert_eq!(parse_split_name("m-00001-of-00003.gguf"), Some(("m", 3)));
        assert_eq!(parse_split_name("m-00002-of-00003.gguf"), None);
        assert_eq!(parse_split_name("m.gguf"), None);
        let p = split_shard_paths(Path::new("/x/Qwen-Q4_K_M-00001-of-00002.gguf"));
        assert_eq!(p[1], Path::new("/x/Qwen-Q4_K_M-00002-of-00002.gguf"));
    }
}
