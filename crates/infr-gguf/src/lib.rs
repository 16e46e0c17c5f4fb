//! GGUF files: bounds-checked parsing of the header, metadata and tensor table, zero-copy access
//! to tensor bytes through `mmap`, split shards (`-00001-of-00003.gguf`), and a writer.
//!
//! GGUF files come from strangers. Every count, length and offset read from a file is checked
//! against the bytes that actually remain before anything is allocated, so a truncated or
//! hostile file yields a [`GgufError`] that names what is wrong, never a panic or a huge
//! allocation. The layout follows llama.cpp's `ggml/src/gguf.cpp` and `docs/gguf.md`.

mod cursor;
mod error;
mod file;
mod model;
mod stream_writer;
mod value;
mod writer;

pub use error::GgufError;
pub use file::{GgufFile, TensorData, TensorInfo};
pub use infr_quant::GgmlType;
pub use model::{split_shard_paths, GgufModel, TensorRef};
pub use stream_writer::{GgufStreamWriter, TensorSpec};
pub use value::{Metadata, Value, ValueType};
pub use writer::GgufWriter;

/// The four magic bytes at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Default tensor data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a ggml tensor can have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
