//! Hostile and broken files: every one must give a clear error, never a panic.

use infr_gguf::{GgmlType, GgufError, GgufFile, GgufWriter, Value, ValueType};

fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("llama.block_count", Value::U32(2));
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, vec![Value::String("a".into()), Value::String("b".into())]),
    );
    w.set("nested", Value::Array(ValueType::Array, vec![Value::Array(ValueType::I32, vec![Value::I32(-1)])]));
    w.add_tensor("a", &[32, 2], GgmlType::F32, vec![0u8; 32 * 2 * 4]).unwrap();
    w.add_tensor("b", &[32], GgmlType::Q8_0, vec![0u8; 34]).unwrap();
    w.to_bytes()
}

#[test]
fn round_trip() {
    let f = GgufFile::from_bytes(sample()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata().require_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.metadata().u64("llama.block_count").unwrap(), Some(2));
    assert_eq!(f.metadata().str_array("tokenizer.ggml.tokens").unwrap().unwrap(), vec!["a", "b"]);
    let b = f.tensor("b").unwrap();
    assert_eq!(b.ty, GgmlType::Q8_0);
    assert_eq!(f.tensor_bytes(b).len(), 34);
    assert_eq!(f.tensor("a").unwrap().n_elements(), 64);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample();
    // Trailing alignment padding after the last tensor may be cut; nothing before it may.
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let b = f.tensor("b").unwrap();
    let end = (f.data_offset() + b.offset + b.size) as usize;
    assert!(GgufFile::from_bytes(bytes[..end].to_vec()).is_ok());
    for len in 0..end {
        let r = GgufFile::from_bytes(bytes[..len].to_vec());
        let e = r.expect_err(&format!("prefix of {len} bytes parsed"));
        let msg = e.to_string();
        assert!(!msg.is_empty());
    }
}

#[test]
fn bad_magic() {
    let mut b = sample();
    b[0] = b'X';
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::BadMagic(_))));
}

#[test]
fn bad_version() {
    let mut b = sample();
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    let e = GgufFile::from_bytes(b).unwrap_err();
    assert!(matches!(e, GgufError::UnsupportedVersion(1)), "{e}");
}

#[test]
fn absurd_counts() {
    let mut b = sample();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes()); // tensor count
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::AbsurdCount { .. })));
    let mut b = sample();
    b[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes()); // kv count
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::AbsurdCount { .. })));
    // A string length claiming more bytes than the file has.
    let mut b = sample();
    b[24..32].copy_from_slice(&(1u64 << 50).to_le_bytes());
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::AbsurdCount { .. })));
}

/// Find `needle` in `hay` (first occurrence).
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}

#[test]
fn huge_array_length() {
    let mut b = sample();
    let at = find(&b, b"tokenizer.ggml.tokens") + "tokenizer.ggml.tokens".len() + 4 + 4;
    b[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let e = GgufFile::from_bytes(b).unwrap_err();
    assert!(matches!(e, GgufError::AbsurdCount { .. }), "{e}");
}

#[test]
fn bad_value_type() {
    let mut b = sample();
    let at = find(&b, b"llama.block_count") + "llama.block_count".len();
    b[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let e = GgufFile::from_bytes(b).unwrap_err();
    assert!(matches!(e, GgufError::BadValueType { id: 99, .. }), "{e}");
    assert!(e.to_string().contains("llama.block_count"));
}

#[test]
fn wrong_types_on_access() {
    let f = GgufFile::from_bytes(sample()).unwrap();
    let e = f.metadata().str("llama.block_count").unwrap_err();
    assert!(matches!(e, GgufError::WrongType { .. }));
    assert!(e.to_string().contains("llama.block_count"), "{e}");
    assert!(matches!(f.metadata().require_u64("missing.key"), Err(GgufError::MissingKey(_))));
}

/// Byte position of the tensor-table entry fields of tensor `name`.
fn tensor_entry(b: &[u8], name: &str) -> usize {
    // The tensor names come after the metadata; search from the end of the KV section.
    let key = find(b, b"nested");
    key + find(&b[key..], &[&(name.len() as u64).to_le_bytes()[..], name.as_bytes()].concat()) + 8 + name.len()
}

#[test]
fn out_of_range_offset() {
    let mut b = sample();
    let at = tensor_entry(&b, "b") + 4 + 8 + 4; // n_dims, 1 dim, type
    b[at..at + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
    let e = GgufFile::from_bytes(b).unwrap_err();
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{e}");
}

#[test]
fn overflowing_offset() {
    let mut b = sample();
    let at = tensor_entry(&b, "b") + 4 + 8 + 4;
    b[at..at + 8].copy_from_slice(&(u64::MAX - 31).to_le_bytes());
    assert!(GgufFile::from_bytes(b).is_err());
}

#[test]
fn misaligned_offset() {
    let mut b = sample();
    let at = tensor_entry(&b, "b") + 4 + 8 + 4;
    b[at..at + 8].copy_from_slice(&3u64.to_le_bytes());
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::Misaligned { .. })));
}

#[test]
fn bad_tensor_type_and_shape() {
    let mut b = sample();
    let at = tensor_entry(&b, "b") + 4 + 8;
    b[at..at + 4].copy_from_slice(&31u32.to_le_bytes());
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::BadTensorType { id: 31, .. })));

    let mut b = sample();
    let at = tensor_entry(&b, "b");
    b[at..at + 4].copy_from_slice(&7u32.to_le_bytes());
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::BadShape { .. })));

    let mut b = sample();
    let at = tensor_entry(&b, "b") + 4;
    b[at..at + 8].copy_from_slice(&33u64.to_le_bytes()); // not a multiple of 32
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::NotBlockAligned { .. })));

    let mut b = sample();
    let at = tensor_entry(&b, "a") + 4;
    b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    b[at + 8..at + 16].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::BadShape { .. })));
}

#[test]
fn duplicate_key() {
    let mut w = GgufWriter::new();
    w.set("k", Value::U8(1));
    w.set("l", Value::U8(2));
    let mut b = w.to_bytes();
    let at = find(&b, b"l");
    b[at] = b'k';
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::DuplicateKey(_))));
}

#[test]
fn deep_nesting_is_bounded() {
    // Hand-build arrays nested 6 deep.
    let mut v = Value::Array(ValueType::U8, vec![Value::U8(1)]);
    for _ in 0..6 {
        v = Value::Array(ValueType::Array, vec![v]);
    }
    let mut w = GgufWriter::new();
    w.set("deep", v);
    assert!(matches!(GgufFile::from_bytes(w.to_bytes()), Err(GgufError::TooDeep { .. })));
}

#[test]
fn invalid_utf8_and_bad_bool() {
    let mut w = GgufWriter::new();
    w.set("s", Value::String("abc".into()));
    w.set("t", Value::Bool(true));
    let mut b = w.to_bytes();
    let at = find(&b, b"abc");
    b[at] = 0xff;
    assert!(matches!(GgufFile::from_bytes(b), Err(GgufError::InvalidUtf8 { .. })));
    let mut b = w.to_bytes();
    let at = find(&b, b"t") + 1 + 4;
    b[at] = 7;
    assert!(GgufFile::from_bytes(b).is_err());
}

#[test]
fn missing_file_names_the_path() {
    let e = GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/model.gguf"));
}

/// Hardening issue, defect 13: a FIFO as the model path hung every command (opening it waits
/// for a writer) and a directory reported "No such device": both say what they are.
#[test]
fn paths_that_are_not_files() {
    let d = tempfile::tempdir().unwrap();
    let e = GgufFile::open(d.path()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("is a directory, not a GGUF file"), "{e}");
    let e = GgufFile::open("/dev/null").err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("character device"), "{e}");
    let fifo = d.path().join("model.gguf");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().map(|s| s.success()).unwrap_or(false);
    assert!(made, "mkfifo is needed for this test");
    let e = GgufFile::open(&fifo).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("FIFO"), "{e}");
}
