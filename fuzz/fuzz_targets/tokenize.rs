//! Fuzz the tokenizers with real vocabularies: SmolLM2 (byte-level BPE) and Gemma 3
//! (SentencePiece). The first input byte picks the tokenizer; the rest is used twice:
//!
//! * as text (when valid UTF-8): `encode` with and without special tokens, `decode` of the
//!   result, and a `StreamDecoder` fed the same ids one at a time, whose text must equal
//!   `decode`'s (documented in decode.rs for models without `clean_spaces`, which both are);
//! * as little-endian u32 token ids (raw, and folded into the vocabulary plus a few ids past
//!   its end), decoded every way the crate offers.
//!
//! The models are read from `../models/` (override with `INFR_FUZZ_MODELS`); metadata is
//! loaded once per process.
#![no_main]

#[path = "common/altstack.rs"]
mod altstack;

use std::path::PathBuf;
use std::sync::OnceLock;

use infr_gguf::GgufModel;
use infr_tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fn load(file: &str) -> Tokenizer {
    let dir = std::env::var_os("INFR_FUZZ_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../models")));
    let path = dir.join(file);
    let model = GgufModel::open(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    Tokenizer::from_metadata(model.metadata()).unwrap_or_else(|e| panic!("tokenizer of {}: {e}", path.display()))
}

fn tokenizers() -> &'static [Tokenizer; 2] {
    static TOKS: OnceLock<[Tokenizer; 2]> = OnceLock::new();
    TOKS.get_or_init(|| [load("smollm2-135m-instruct-q4_1.gguf"), load("gemma3-270m-q4_k_m.gguf")])
}

/// Stream `ids` through a fresh decoder and compare with `decode`.
fn check_stream(tok: &Tokenizer, ids: &[u32]) {
    let whole = tok.decode(ids);
    let mut sd = tok.stream_decoder();
    let mut streamed = String::new();
    for &id in ids {
        streamed.push_str(&sd.push(id));
    }
    streamed.push_str(&sd.flush());
    assert_eq!(streamed, whole, "StreamDecoder text differs from decode for ids {ids:?}");
    assert!(sd.pending().is_empty());

    // Without special tokens: only checked for panics.
    let mut sd = tok.stream_decoder().with_special(false);
    let _ = sd.push_all(ids);
    let _ = sd.flush();
    let _ = tok.detokenize(ids, true, false);
    let _ = tok.detokenize(ids, true, true);
    let _ = tok.detokenize(ids, false, false);
}

fuzz_target!(|data: &[u8]| {
    altstack::install();
    let Some((&sel, rest)) = data.split_first() else { return };
    let tok = &tokenizers()[usize::from(sel & 1)];
    let n_vocab = tok.vocab_size() as u32;

    if let Ok(text) = std::str::from_utf8(rest) {
        for (add_special, parse_special) in [(true, true), (false, false)] {
            let ids = tok.encode(text, add_special, parse_special);
            for &id in &ids {
                assert!(id < n_vocab, "encode produced id {id} outside the vocabulary ({n_vocab})");
            }
            check_stream(tok, &ids);
        }
    }

    let raw: Vec<u32> = rest.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    let folded: Vec<u32> = raw.iter().map(|&id| id % (n_vocab + 4)).collect();
    for ids in [&raw, &folded] {
        check_stream(tok, ids);
        for &id in ids.iter() {
            let _ = (tok.token_to_piece(id), tok.piece_with(id, false), tok.token_text(id), tok.token_score(id));
            let _ = (tok.is_eog(id), tok.is_control(id), tok.is_user_defined(id), tok.is_byte(id));
        }
    }
});
