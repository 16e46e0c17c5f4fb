//! One GGUF file: header, metadata, tensor table, and the mapped bytes behind it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use infr_quant::GgmlType;
use memmap2::Mmap;

use crate::cursor::Cursor;
use crate::value::{read_value_type, Metadata, Value};
use crate::{GgufError, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};

/// Where a tensor is and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Shape in ggml order: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Byte offset from the start of the data section.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Number of rows (product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// The bytes of a file: memory-mapped from disk or owned (tests, in-memory files).
#[derive(Clone)]
enum Bytes {
    Mapped(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file. Cheap to clone; tensor bytes are borrowed from the mapping.
#[derive(Clone)]
pub struct GgufFile {
    bytes: Bytes,
    version: u32,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
    data_offset: u64,
    alignment: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .field("data_offset", &self.data_offset)
            .finish()
    }
}

impl GgufFile {
    /// Map and parse the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_owned(), source };
        // Look before opening: opening a FIFO blocks until a writer appears.
        let meta = std::fs::metadata(path).map_err(io)?;
        if let Some(kind) = not_a_regular_file(&meta) {
            return Err(GgufError::NotAFile { path: path.to_owned(), kind });
        }
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the mapping is read-only; a file truncated by another process while mapped
        // would fault, which is the same contract every mmap-based loader (llama.cpp too) has.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(Bytes::Mapped(Arc::new(map)))
    }

    /// Parse a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::parse(Bytes::Owned(Arc::new(bytes)))
    }

    fn parse(bytes: Bytes) -> Result<Self, GgufError> {
        let (version, metadata, tensors, data_offset, alignment) = parse_header(bytes.as_slice())?;
        let mut by_name = HashMap::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            if by_name.insert(t.name.clone(), i).is_some() {
                return Err(GgufError::DuplicateTensor(t.name.clone()));
            }
        }
        Ok(Self { bytes, version, metadata, tensors, by_name, data_offset, alignment })
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata key/value set.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensor table in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Look a tensor up by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// Byte offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Tensor data alignment.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Total file size in bytes.
    pub fn file_len(&self) -> u64 {
        self.bytes.as_slice().len() as u64
    }

    /// The raw bytes of a tensor (already bounds-checked at parse time).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + t.offset) as usize;
        &self.bytes.as_slice()[start..start + t.size as usize]
    }

    /// The bytes of a tensor as an owned handle that keeps the mapping alive, so backends can
    /// use weights in place without copying or borrowing the file.
    pub fn tensor_data(&self, t: &TensorInfo) -> TensorData {
        let start = (self.data_offset + t.offset) as usize;
        TensorData { bytes: self.bytes.clone(), start, len: t.size as usize }
    }
}

/// What a path is when it is not a regular file (after following symlinks), for errors.
fn not_a_regular_file(meta: &std::fs::Metadata) -> Option<&'static str> {
    let ft = meta.file_type();
    if ft.is_file() {
        return None;
    }
    if ft.is_dir() {
        return Some("directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return Some("FIFO (named pipe)");
        }
        if ft.is_socket() {
            return Some("socket");
        }
        if ft.is_char_device() {
            return Some("character device");
        }
        if ft.is_block_device() {
            return Some("block device");
        }
    }
    Some("special file")
}

/// Shared, read-only bytes of one tensor (a view into the file mapping or an owned buffer).
#[derive(Clone)]
pub struct TensorData {
    bytes: Bytes,
    start: usize,
    len: usize,
}

impl TensorData {
    /// Wrap an owned buffer (for weights that do not come from a file).
    pub fn from_vec(v: Vec<u8>) -> Self {
        let len = v.len();
        Self { bytes: Bytes::Owned(Arc::new(v)), start: 0, len }
    }

    /// A sub-range of these bytes sharing the same storage (one expert of a 3-D weight).
    /// Panics if the range is outside the tensor.
    pub fn slice(&self, range: std::ops::Range<usize>) -> Self {
        assert!(range.start <= range.end && range.end <= self.len, "slice {range:?} of {} bytes", self.len);
        Self { bytes: self.bytes.clone(), start: self.start + range.start, len: range.end - range.start }
    }
}

impl std::ops::Deref for TensorData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes.as_slice()[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for TensorData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TensorData({} bytes)", self.len)
    }
}

type Header = (u32, Metadata, Vec<TensorInfo>, u64, u64);

fn parse_header(bytes: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor::new(bytes);
    let magic: [u8; 4] = c.array(&|| "magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic(magic));
    }
    let version = c.u32(&|| "version".into())?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion(version));
    }
    // A tensor entry takes at least 8 (name len) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
    let n_tensors = c.u64(&|| "tensor count".into())?;
    let n_kv = c.u64(&|| "metadata count".into())?;
    let min_bytes = |n: u64, each: u64| n.checked_mul(each).filter(|&b| b <= c.remaining() as u64);
    if min_bytes(n_kv, 8 + 4 + 1).is_none() {
        return Err(GgufError::AbsurdCount { what: "metadata count".into(), count: n_kv, file_len: c.file_len() });
    }
    if min_bytes(n_tensors, 32).is_none() {
        return Err(GgufError::AbsurdCount { what: "tensor count".into(), count: n_tensors, file_len: c.file_len() });
    }

    let mut metadata = Metadata::new();
    for i in 0..n_kv {
        let key = c.string(&|| format!("name of metadata key #{i}"))?;
        let ty = read_value_type(&mut c, &key)?;
        let value = Value::read(&mut c, ty, &key, 0)?;
        metadata.insert_new(key, value)?;
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => {
            let a = v.as_u64().ok_or_else(|| GgufError::WrongType {
                key: "general.alignment".into(),
                expected: "unsigned integer",
                found: v.type_name(),
            })?;
            if a == 0 || !a.is_power_of_two() {
                return Err(GgufError::BadAlignment(a));
            }
            a
        }
    };

    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        tensors.push(read_tensor_info(&mut c, i, alignment)?);
    }

    let data_offset = (c.pos() as u64).div_ceil(alignment) * alignment;
    let data_len = (bytes.len() as u64).saturating_sub(data_offset);
    for t in &tensors {
        let end = t.offset.saturating_add(t.size);
        if end > data_len {
            return Err(GgufError::TensorOutOfBounds { name: t.name.clone(), start: t.offset, end, data_len });
        }
    }
    Ok((version, metadata, tensors, data_offset, alignment))
}

fn read_tensor_info(c: &mut Cursor<'_>, i: u64, alignment: u64) -> Result<TensorInfo, GgufError> {
    let name = c.string(&|| format!("name of tensor #{i}"))?;
    let what = || format!("tensor '{name}'");
    let n_dims = c.u32(&what)? as usize;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::BadShape {
            name,
            dims: vec![],
            why: format!("{n_dims} dimensions, expected 1..={MAX_DIMS}"),
        });
    }
    let mut dims = Vec::with_capacity(n_dims);
    for _ in 0..n_dims {
        dims.push(c.u64(&what)?);
    }
    let type_id = c.u32(&what)?;
    let offset = c.u64(&what)?;
    let ty = GgmlType::from_id(type_id).ok_or_else(|| GgufError::BadTensorType { name: name.clone(), id: type_id })?;
    if dims.contains(&0) {
        return Err(GgufError::BadShape { name, dims, why: "a dimension is zero".into() });
    }
    let n_elements = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).filter(|&n| n < (1u64 << 60));
    let Some(n_elements) = n_elements else {
        return Err(GgufError::BadShape { name, dims, why: "element count overflows".into() });
    };
    let info = ty.info();
    if dims[0] % info.block_size as u64 != 0 {
        return Err(GgufError::NotBlockAligned { name, ty, block: info.block_size, ne0: dims[0] });
    }
    let size = (n_elements / info.block_size as u64) * info.type_size as u64;
    if offset % alignment != 0 {
        return Err(GgufError::Misaligned { name, offset, alignment });
    }
    Ok(TensorInfo { name, dims, ty, offset, size })
}
