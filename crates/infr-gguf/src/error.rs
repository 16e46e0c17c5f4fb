use std::path::PathBuf;

use infr_quant::GgmlType;

/// Everything that can be wrong with a GGUF file, each naming what and where.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The path is a directory, pipe, socket or device: mapping it would fail oddly (a
    /// directory says "No such device") or block forever (a FIFO).
    #[error("{path}: is a {kind}, not a GGUF file")]
    NotAFile { path: PathBuf, kind: &'static str },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: magic bytes are {0:02x?}, expected \"GGUF\"")]
    BadMagic([u8; 4]),
    /// GGUF v1 or an unknown future version.
    #[error("unsupported GGUF version {0} (supported: 2 and 3)")]
    UnsupportedVersion(u32),
    /// The file ends before a field it announces.
    #[error("file truncated: {what} at byte {offset} needs {needed} bytes, only {available} remain")]
    Truncated { what: String, offset: u64, needed: u64, available: u64 },
    /// A count that cannot possibly fit in the file (or in memory).
    #[error("{what}: count {count} is impossible for a file of {file_len} bytes")]
    AbsurdCount { what: String, count: u64, file_len: u64 },
    /// A string that is not UTF-8.
    #[error("{what}: string is not valid UTF-8")]
    InvalidUtf8 { what: String },
    /// An unknown metadata value type id.
    #[error("metadata key '{key}': unknown value type id {id}")]
    BadValueType { key: String, id: u32 },
    /// Arrays nested deeper than we accept.
    #[error("metadata key '{key}': arrays nested more than {max} levels")]
    TooDeep { key: String, max: usize },
    /// The same key appears twice.
    #[error("duplicate metadata key '{0}'")]
    DuplicateKey(String),
    /// The same tensor name appears twice (also across shards).
    #[error("duplicate tensor name '{0}'")]
    DuplicateTensor(String),
    /// A tensor type id ggml does not define.
    #[error("tensor '{name}': unknown ggml type id {id}")]
    BadTensorType { name: String, id: u32 },
    /// A tensor with zero or more than four dimensions, or a zero-sized / overflowing shape.
    #[error("tensor '{name}': invalid shape {dims:?} ({why})")]
    BadShape { name: String, dims: Vec<u64>, why: String },
    /// A tensor whose first dimension is not a multiple of its type's block size.
    #[error("tensor '{name}': {ty} needs the first dimension to be a multiple of {block}, got {ne0}")]
    NotBlockAligned { name: String, ty: GgmlType, block: usize, ne0: u64 },
    /// A tensor offset not aligned to `general.alignment`.
    #[error("tensor '{name}': offset {offset} is not a multiple of the alignment {alignment}")]
    Misaligned { name: String, offset: u64, alignment: u64 },
    /// A tensor whose bytes lie (partly) outside the file.
    #[error(
        "tensor '{name}': bytes {start}..{end} lie outside the data section of {data_len} bytes (file truncated?)"
    )]
    TensorOutOfBounds { name: String, start: u64, end: u64, data_len: u64 },
    /// `general.alignment` is zero or not a power of two.
    #[error("general.alignment = {0} is not a power of two")]
    BadAlignment(u64),
    /// A metadata key has a different type than expected.
    #[error("metadata key '{key}': expected {expected}, found {found}")]
    WrongType { key: String, expected: &'static str, found: String },
    /// A required metadata key is absent.
    #[error("metadata key '{0}' is missing")]
    MissingKey(String),
    /// A tensor asked for by name does not exist.
    #[error("tensor '{0}' not found")]
    MissingTensor(String),
    /// Split shards that do not belong together.
    #[error("split GGUF: {0}")]
    BadSplit(String),
}
