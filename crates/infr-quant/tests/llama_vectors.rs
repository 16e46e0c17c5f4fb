//! Bit-exactness against llama.cpp: vectors produced by `tests/gen_vectors.py` (which calls
//! ggml's own `to_float` / `from_float_ref`) must be reproduced exactly. See the script header
//! for the file format and how to regenerate.

use std::path::{Path, PathBuf};

use infr_quant::{dequantize, quantize, GgmlType};

/// Types with a llama.cpp dequantizer (`to_float`, or `dequantize_row_q8_K`).
const DEQUANT: &[GgmlType] = &[
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ1_S,
    GgmlType::IQ1_M,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ2_S,
    GgmlType::IQ3_XXS,
    GgmlType::IQ3_S,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
];

/// Types with a llama.cpp reference quantizer that we implement.
const QUANT: &[GgmlType] = &[
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
    GgmlType::NVFP4,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
];

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("vectors")
}

/// A little-endian byte reader that panics with context on truncation.
struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    what: String,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        assert!(self.pos + n <= self.b.len(), "{}: truncated at byte {}", self.what, self.pos);
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        s
    }
    fn u8(&mut self) -> u8 {
        self.take(1)[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().unwrap())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    }
    fn done(&self) -> bool {
        self.pos == self.b.len()
    }
}

fn read_file(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| {
        panic!("missing test vector file {} ({e}); regenerate with tests/gen_vectors.py", path.display())
    })
}

/// Compare by bits (so NaN == NaN with the same payload, and -0 != +0).
fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i].to_bits() != want[i].to_bits()).collect();
    if let Some(&i) = bad.first() {
        panic!(
            "{what}: {} of {} values differ; first at {i}: got {:e} ({:#010x}), llama.cpp {:e} ({:#010x})",
            bad.len(),
            got.len(),
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

struct Record {
    kind: u8,
    bytes: Vec<u8>,
    floats: Vec<f32>,
}

fn read_type_vectors(ty: GgmlType) -> Vec<Record> {
    let path = vectors_dir().join(format!("{}.bin", ty.info().name));
    let data = read_file(&path);
    let mut r = Reader { b: &data, pos: 0, what: path.display().to_string() };
    assert_eq!(r.take(4), b"IQV1", "{}: bad magic", r.what);
    let mut out = Vec::new();
    while !r.done() {
        let kind = r.u8();
        let id = r.u32();
        assert_eq!(id, ty.id(), "{}: record for type id {id}", r.what);
        let n = r.u32() as usize;
        let nb = r.u32() as usize;
        let bytes = r.take(nb).to_vec();
        let floats = r.f32s(n);
        out.push(Record { kind, bytes, floats });
    }
    out
}

#[test]
fn dequantize_matches_llama_cpp() {
    let mut total = 0;
    for &ty in DEQUANT {
        let recs = read_type_vectors(ty);
        let mut found = false;
        for rec in recs.iter().filter(|r| r.kind == 0) {
            found = true;
            let mut got = vec![0f32; rec.floats.len()];
            dequantize(ty, &rec.bytes, &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_bits_eq(&format!("dequantize {ty}"), &got, &rec.floats);
            total += got.len();
        }
        assert!(found, "{ty}: no dequantize vectors");
    }
    eprintln!("dequantize: {} types, {total} values bit-exact with llama.cpp", DEQUANT.len());
}

#[test]
fn quantize_matches_llama_cpp() {
    let mut total = 0;
    for &ty in QUANT {
        let recs = read_type_vectors(ty);
        let mut found = false;
        for rec in recs.iter().filter(|r| r.kind == 1) {
            found = true;
            let got = quantize(ty, &rec.floats).unwrap_or_else(|e| panic!("{ty}: {e}"));
            assert_eq!(got.len(), rec.bytes.len(), "quantize {ty}: length");
            let bs = ty.info().type_size;
            if let Some(i) = (0..got.len()).find(|&i| got[i] != rec.bytes[i]) {
                let blk = i / bs;
                panic!(
                    "quantize {ty}: byte {i} (block {blk}, offset {}) differs: got {:#04x}, llama.cpp {:#04x}\n\
                     ours  {:02x?}\nllama {:02x?}",
                    i % bs,
                    got[i],
                    rec.bytes[i],
                    &got[blk * bs..(blk + 1) * bs],
                    &rec.bytes[blk * bs..(blk + 1) * bs]
                );
            }
            total += rec.floats.len();
        }
        assert!(found, "{ty}: no quantize vectors");
    }
    eprintln!("quantize: {} types, {total} values bit-exact with llama.cpp", QUANT.len());
}

const MODELS: &[&str] =
    &["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"];

fn models_dir() -> PathBuf {
    match std::env::var_os("INFR_TEST_MODELS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models"),
    }
}

#[test]
fn real_model_tensors_match_llama_cpp() {
    let require = std::env::var("INFR_REQUIRE_MODELS").is_ok_and(|v| v == "1");
    let mut checked = 0;
    for model in MODELS {
        let stem = model.trim_end_matches(".gguf");
        let vec_path = vectors_dir().join(format!("model_{stem}.bin"));
        let data = read_file(&vec_path);
        let model_path = models_dir().join(model);
        if !model_path.exists() {
            assert!(!require, "INFR_REQUIRE_MODELS=1 but {} is missing", model_path.display());
            eprintln!("notice: {} not found; skipping its tensor checks", model_path.display());
            continue;
        }
        let file = infr_gguf::GgufFile::open(&model_path).unwrap_or_else(|e| panic!("{model}: {e}"));
        let mut r = Reader { b: &data, pos: 0, what: vec_path.display().to_string() };
        assert_eq!(r.take(4), b"IQM1", "{}: bad magic", r.what);
        while !r.done() {
            let name_len = r.u16() as usize;
            let name = String::from_utf8(r.take(name_len).to_vec()).expect("utf-8 tensor name");
            let ty = GgmlType::from_id(r.u32()).expect("known type");
            let offset = r.u64();
            let row = r.u32() as usize;
            let rows = r.u32() as usize;
            let want = r.f32s(row * rows);
            let t = file.tensor(&name).unwrap_or_else(|| panic!("{model}: no tensor {name}"));
            assert_eq!(t.ty, ty, "{model}/{name}: type");
            assert_eq!(file.data_offset() + t.offset, offset, "{model}/{name}: data offset");
            assert_eq!(t.dims[0] as usize, row, "{model}/{name}: row size");
            let nbytes = ty.row_bytes(row * rows).expect("aligned rows");
            let bytes = &file.tensor_bytes(t)[..nbytes];
            let mut got = vec![0f32; row * rows];
            dequantize(ty, bytes, &mut got).unwrap_or_else(|e| panic!("{model}/{name}: {e}"));
            assert_bits_eq(&format!("{model}/{name} ({ty})"), &got, &want);
            checked += 1;
        }
    }
    eprintln!("model tensors checked: {checked}");
}
