//! llama.cpp tokenizer oracle: every case of `testdata/oracle/tokenize/*.jsonl` must tokenize to
//! exactly the recorded ids, and detokenize back to the text.
//!
//! Models are read from `$INFR_TEST_MODELS` (default `<repo>/models`). A missing model skips its
//! cases with a note, unless `INFR_REQUIRE_MODELS` is set, which turns it into a failure.

use std::path::{Path, PathBuf};

use infr_gguf::GgufModel;
use infr_tokenizer::{Tokenizer, TokenizerKind};

struct Case {
    text: String,
    add_special: bool,
    parse_special: bool,
    ids: Vec<u32>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cases(stem: &str) -> Vec<Case> {
    let path = repo().join("testdata/oracle/tokenize").join(format!("{stem}.jsonl"));
    let body = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("oracle line is JSON");
            Case {
                text: v["text"].as_str().expect("text").to_owned(),
                add_special: v["add_special"].as_bool().expect("add_special"),
                parse_special: v["parse_special"].as_bool().expect("parse_special"),
                ids: v["ids"].as_array().expect("ids").iter().map(|i| i.as_u64().expect("id") as u32).collect(),
            }
        })
        .collect()
}

/// The tokenizer of a model file, or `None` (after a note) when the file is absent.
fn load(file: &str) -> Option<Tokenizer> {
    let dir = std::env::var_os("INFR_TEST_MODELS").map(PathBuf::from).unwrap_or_else(|| repo().join("models"));
    let path = dir.join(file);
    if !path.exists() {
        if std::env::var_os("INFR_REQUIRE_MODELS").is_some() {
            panic!("{} is missing and INFR_REQUIRE_MODELS is set", path.display());
        }
        eprintln!("skipping: {} not found (set INFR_TEST_MODELS)", path.display());
        return None;
    }
    let model = GgufModel::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(Tokenizer::from_metadata(model.metadata()).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn check_model(file: &str, stem: &str) {
    let Some(tok) = load(file) else { return };
    let cases = cases(stem);
    let mut bad = Vec::new();
    for c in &cases {
        let got = tok.encode(&c.text, c.add_special, c.parse_special);
        if got != c.ids {
            bad.push(format!(
                "  text {:?} (add_special {}, parse_special {})\n    expected {:?}\n    got      {:?}",
                c.text, c.add_special, c.parse_special, c.ids, got
            ));
        }
    }
    println!("{file}: {}/{} oracle cases match", cases.len() - bad.len(), cases.len());
    assert!(bad.is_empty(), "{file}: {} of {} cases differ:\n{}", bad.len(), cases.len(), bad.join("\n"));
}

fn check_round_trip(file: &str, stem: &str) {
    let Some(tok) = load(file) else { return };
    let mut bad = Vec::new();
    for c in cases(stem) {
        let ids = tok.encode(&c.text, false, false);
        let back = tok.decode(&ids);
        // SentencePiece with a space prefix adds a leading space that decoding removes again.
        if back != c.text {
            bad.push(format!("  {:?} -> {ids:?} -> {back:?}", c.text));
        }
        // Streaming gives the same text, piece by piece.
        let mut dec = tok.stream_decoder();
        let mut streamed: String = ids.iter().map(|&id| dec.push(id)).collect();
        streamed.push_str(&dec.flush());
        if streamed != back {
            bad.push(format!("  stream {:?} != decode {:?}", streamed, back));
        }
    }
    assert!(bad.is_empty(), "{file}: round trip fails:\n{}", bad.join("\n"));
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("smollm2-135m-instruct-q4_1.gguf", "smollm2-135m-instruct-q4_1");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m");
}

#[test]
fn qwen25_05b_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m");
}

#[test]
fn qwen25_15b_matches_llama_cpp() {
    // Same tokenizer as the 0.5B model (identical tokens, merges, types and pre).
    check_model("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m");
}

#[test]
fn round_trips() {
    check_round_trip("smollm2-135m-instruct-q4_1.gguf", "smollm2-135m-instruct-q4_1");
    check_round_trip("gemma3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m");
    check_round_trip("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m");
}

#[test]
fn model_facts() {
    if let Some(t) = load("smollm2-135m-instruct-q4_1.gguf") {
        assert_eq!(t.kind(), TokenizerKind::Bpe);
        assert_eq!(t.pre(), "smollm");
        assert_eq!(t.pre_family(), "starcoder");
        assert!(!t.add_bos() && !t.pre_fallback());
        assert_eq!(t.token_id("<|im_end|>"), Some(2));
        assert!(t.is_eog(2) && t.is_eog(0) && t.is_control(1) && !t.is_eog(1));
        assert_eq!(t.eot(), Some(2));
    }
    if let Some(t) = load("gemma3-270m-q4_k_m.gguf") {
        assert_eq!(t.kind(), TokenizerKind::Spm);
        assert!(t.add_bos() && !t.add_space_prefix());
        assert_eq!((t.bos(), t.eos()), (Some(2), Some(1)));
        let eot = t.token_id("<end_of_turn>").expect("gemma has <end_of_turn>");
        assert_eq!(t.eot(), Some(eot));
        assert!(t.is_eog(eot) && t.is_eog(1));
        let nl = t.token_id("<0x0A>").expect("byte token");
        assert!(t.is_byte(nl));
        assert_eq!(t.token_to_piece(nl), b"\n");
        assert_eq!(t.token_to_piece(t.token_id("▁the").expect("▁the")), b" the");
    }
    if let Some(t) = load("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf") {
        assert_eq!(t.pre_family(), "qwen2");
        let im_end = t.token_id("<|im_end|>").expect("<|im_end|>");
        let eot_text = t.token_id("<|endoftext|>").expect("<|endoftext|>");
        assert_eq!(t.eos(), Some(im_end));
        assert_eq!(t.eot(), Some(im_end));
        assert!(t.is_eog(im_end) && t.is_eog(eot_text));
        assert_eq!(t.token_to_piece(t.token_id("Ġhello").expect("Ġhello")), b" hello");
        assert!(t.is_user_defined(t.token_id("<tool_call>").expect("<tool_call>")));
    }
}

#[test]
fn streaming_never_splits_characters() {
    for file in
        ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"]
    {
        let Some(tok) = load(file) else { continue };
        let text = "emoji 👨‍👩‍👧‍👦 🇯🇵 🦀 漢字とかな 한국어 Ωμέγα ✓ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢";
        let ids = tok.encode(text, false, false);
        // At least one character must be spread over several tokens for this test to mean much.
        let split = ids.iter().any(|&id| std::str::from_utf8(&tok.token_to_piece(id)).is_err());
        assert!(split, "{file}: no token carries a partial character");
        let mut dec = tok.stream_decoder();
        let mut out = String::new();
        for &id in &ids {
            let s = dec.push(id);
            assert!(!s.contains('\u{FFFD}'), "{file}: partial character emitted: {s:?}");
            out.push_str(&s);
        }
        assert!(dec.pending().is_empty(), "{file}: bytes left over");
        out.push_str(&dec.flush());
        assert_eq!(out, text, "{file}");
    }
}
