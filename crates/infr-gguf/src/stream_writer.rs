//! Writing GGUF v3 files whose tensor data is produced chunk by chunk.
//!
//! [`crate::GgufWriter`] holds every tensor in memory, which is fine for tests but not for a
//! 5 GB model. [`GgufStreamWriter`] takes the metadata and the tensor table up front (the
//! header records every tensor's offset, so sizes must be known before any data), writes the
//! header, then accepts each tensor's bytes in order, in pieces of any size, inserting the
//! alignment padding itself. The file is written to `<path>.tmp` and renamed into place by
//! [`GgufStreamWriter::finish`]; dropping an unfinished writer removes the temporary file.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use infr_quant::GgmlType;

use crate::value::write_string;
use crate::{GgufError, Metadata, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};

/// A tensor of the table written by [`GgufStreamWriter`]: name, shape and type, no data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Shape in ggml order (`dims[0]` is the row length).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
}

impl TensorSpec {
    /// A tensor of shape `dims` (ggml order) and type `ty`.
    pub fn new(name: impl Into<String>, dims: &[u64], ty: GgmlType) -> Self {
        Self { name: name.into(), dims: dims.to_vec(), ty }
    }

    /// Bytes of data this tensor takes, after checking the shape is valid for its type.
    pub fn byte_len(&self) -> Result<u64, GgufError> {
        let bad = |why: &str| GgufError::BadShape { name: self.name.clone(), dims: self.dims.clone(), why: why.into() };
        if self.dims.is_empty() || self.dims.len() > MAX_DIMS {
            return Err(bad("a tensor has 1 to 4 dimensions"));
        }
        if self.dims.contains(&0) {
            return Err(bad("zero-sized dimension"));
        }
        let block = self.ty.info().block_size as u64;
        if self.dims[0] % block != 0 {
            return Err(GgufError::NotBlockAligned {
                name: self.name.clone(),
                ty: self.ty,
                block: block as usize,
                ne0: self.dims[0],
            });
        }
        let rows = self.dims[1..].iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        rows.and_then(|r| (self.dims[0] / block).checked_mul(self.ty.info().type_size as u64)?.checked_mul(r))
            .ok_or_else(|| bad("size overflows"))
    }
}

/// Streams a GGUF v3 file to disk: header first, then each tensor's data in table order.
pub struct GgufStreamWriter {
    out: Option<BufWriter<File>>,
    path: PathBuf,
    tmp: PathBuf,
    names: Vec<String>,
    sizes: Vec<u64>,
    alignment: u64,
    header_len: u64,
    file_len: u64,
    /// Index of the tensor receiving data, and how many of its bytes are still due.
    current: usize,
    remaining: u64,
    written: u64,
}

impl GgufStreamWriter {
    /// Create `<path>.tmp`, validate the tensor table and write the header. Tensor offsets are
    /// aligned to `general.alignment` when the metadata sets it (a power of two), else 32.
    pub fn create(path: impl AsRef<Path>, metadata: &Metadata, tensors: &[TensorSpec]) -> Result<Self, GgufError> {
        let path = path.as_ref().to_owned();
        let alignment = match metadata.u64("general.alignment")? {
            Some(a) if a.is_power_of_two() => a,
            Some(a) => return Err(GgufError::BadAlignment(a)),
            None => DEFAULT_ALIGNMENT,
        };
        let align = |x: u64| x.div_ceil(alignment) * alignment;
        let mut seen = HashSet::new();
        let mut sizes = Vec::with_capacity(tensors.len());
        for t in tensors {
            if !seen.insert(t.name.as_str()) {
                return Err(GgufError::DuplicateTensor(t.name.clone()));
            }
            sizes.push(t.byte_len()?);
        }

        let mut head = Vec::new();
        head.extend_from_slice(&GGUF_MAGIC);
        head.extend_from_slice(&3u32.to_le_bytes());
        head.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (k, v) in metadata.iter() {
            write_string(&mut head, k);
            head.extend_from_slice(&(v.value_type() as u32).to_le_bytes());
            v.write(&mut head);
        }
        let mut offset = 0u64;
        for (t, &size) in tensors.iter().zip(&sizes) {
            write_string(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ty.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset = align(offset + size);
        }
        head.resize(align(head.len() as u64) as usize, 0);
        let header_len = head.len() as u64;

        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let file = File::create(&tmp).map_err(|source| GgufError::Io { path: path.clone(), source })?;
        let mut w = Self {
            out: Some(BufWriter::with_capacity(1 << 22, file)),
            path,
            tmp,
            names: tensors.iter().map(|t| t.name.clone()).collect(),
            remaining: sizes.first().copied().unwrap_or(0),
            sizes,
            alignment,
            header_len,
            file_len: header_len + offset,
            current: 0,
            written: 0,
        };
        w.put(&head)?;
        Ok(w)
    }

    /// Bytes of header, metadata and tensor table, padded to the alignment.
    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    /// Size the finished file will have.
    pub fn file_len(&self) -> u64 {
        self.file_len
    }

    /// Bytes written so far (header and padding included).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The tensor alignment in use.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Index (in table order) of the tensor that the next data belongs to; `None` when all
    /// tensors are complete.
    pub fn current_tensor(&self) -> Option<usize> {
        (self.current < self.sizes.len()).then_some(self.current)
    }

    fn io_err(&self, kind: std::io::ErrorKind, msg: String) -> GgufError {
        GgufError::Io { path: self.path.clone(), source: std::io::Error::new(kind, msg) }
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), GgufError> {
        let Some(out) = self.out.as_mut() else {
            return Err(self.io_err(std::io::ErrorKind::Other, "writer already failed".into()));
        };
        if let Err(source) = out.write_all(bytes) {
            self.out = None;
            return Err(GgufError::Io { path: self.path.clone(), source });
        }
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Skip tensors of zero remaining bytes, padding each completed one to the alignment.
    fn advance(&mut self) -> Result<(), GgufError> {
        while self.current < self.sizes.len() && self.remaining == 0 {
            let pad = self.sizes[self.current].next_multiple_of(self.alignment) - self.sizes[self.current];
            self.put(&vec![0u8; pad as usize])?;
            self.current += 1;
            self.remaining = self.sizes.get(self.current).copied().unwrap_or(0);
        }
        Ok(())
    }

    /// Append data: the next bytes of the current tensor, continuing into the following
    /// tensors when `bytes` is longer than what the current one still needs.
    pub fn write_data(&mut self, mut bytes: &[u8]) -> Result<(), GgufError> {
        while !bytes.is_empty() {
            self.advance()?;
            if self.current >= self.sizes.len() {
                let msg = format!("{} bytes of tensor data beyond the last tensor", bytes.len());
                return Err(self.io_err(std::io::ErrorKind::InvalidInput, msg));
            }
            let n = (self.remaining.min(bytes.len() as u64)) as usize;
            self.put(&bytes[..n])?;
            self.remaining -= n as u64;
            bytes = &bytes[n..];
        }
        self.advance()
    }

    /// Check every tensor got all its bytes, flush, and rename the file into place.
    /// Returns the file size.
    pub fn finish(mut self) -> Result<u64, GgufError> {
        self.advance()?;
        if let Some(name) = self.names.get(self.current) {
            let msg = format!("tensor '{name}' is missing {} bytes of data", self.remaining);
            return Err(self.io_err(std::io::ErrorKind::UnexpectedEof, msg));
        }
        let out = self.out.take().ok_or_else(|| self.io_err(std::io::ErrorKind::Other, "writer already failed".into()));
        let file = out?.into_inner().map_err(|e| GgufError::Io { path: self.path.clone(), source: e.into_error() })?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|source| GgufError::Io { path: self.path.clone(), source })?;
        // Nothing left for `Drop` to clean up.
        self.tmp = PathBuf::new();
        Ok(self.written)
    }
}

impl Drop for GgufStreamWriter {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            self.out = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GgufFile, GgufWriter, Value};

    fn meta() -> Metadata {
        let mut m = Metadata::new();
        m.insert("general.architecture", Value::String("test".into()));
        m.insert("general.alignment", Value::U32(32));
        m
    }

    #[test]
    fn streams_the_same_bytes_as_the_in_memory_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.gguf");
        let a: Vec<u8> = (0..34u8).collect(); // one q8_0 block
        let b: Vec<u8> = (0..12u8).collect(); // 3 f32
        let specs = [TensorSpec::new("a", &[32], GgmlType::Q8_0), TensorSpec::new("b", &[3, 1], GgmlType::F32)];
        let mut w = GgufStreamWriter::create(&path, &meta(), &specs).unwrap();
        // Pieces that straddle the boundary between the two tensors.
        let all: Vec<u8> = a.iter().chain(&b).copied().collect();
        for piece in all.chunks(5) {
            w.write_data(piece).unwrap();
        }
        let expect_len = w.file_len();
        assert_eq!(w.finish().unwrap(), expect_len);

        let mut mem = GgufWriter::new();
        mem.set("general.architecture", Value::String("test".into()));
        mem.set("general.alignment", Value::U32(32));
        mem.add_tensor("a", &[32], GgmlType::Q8_0, a.clone()).unwrap();
        mem.add_tensor("b", &[3, 1], GgmlType::F32, b.clone()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), mem.to_bytes());
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.tensor_bytes(f.tensor("b").unwrap()), &b[..]);
    }

    #[test]
    fn short_or_long_data_is_an_error_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        let specs = [TensorSpec::new("a", &[4], GgmlType::F32)];
        let mut w = GgufStreamWriter::create(&path, &meta(), &specs).unwrap();
        w.write_data(&[0; 8]).unwrap();
        assert!(w.finish().unwrap_err().to_string().contains("missing 8 bytes"));
        let mut w = GgufStreamWriter::create(&path, &meta(), &specs).unwrap();
        assert!(w.write_data(&[0; 20]).is_err());
        drop(w);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn rejects_bad_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gguf");
        let dup = [TensorSpec::new("a", &[4], GgmlType::F32), TensorSpec::new("a", &[4], GgmlType::F32)];
        assert!(matches!(GgufStreamWriter::create(&path, &meta(), &dup), Err(GgufError::DuplicateTensor(_))));
        let unaligned = [TensorSpec::new("q", &[48], GgmlType::Q4_K)];
        assert!(matches!(GgufStreamWriter::create(&path, &meta(), &unaligned), Err(GgufError::NotBlockAligned { .. })));
        let bad_dir = dir.path().join("no/such/dir/x.gguf");
        assert!(matches!(GgufStreamWriter::create(bad_dir, &meta(), &[]), Err(GgufError::Io { .. })));
    }
}
