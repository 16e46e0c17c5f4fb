//! Unit tests on hand-made vocabularies (no model files needed).

use infr_gguf::{Metadata, Value, ValueType};

use crate::{Tokenizer, TokenizerError, TokenizerKind};

fn strs(v: &[&str]) -> Value {
    Value::Array(ValueType::String, v.iter().map(|s| Value::String((*s).to_owned())).collect())
}
fn i32s(v: &[i32]) -> Value {
    Value::Array(ValueType::I32, v.iter().map(|&x| Value::I32(x)).collect())
}
fn f32s(v: &[f32]) -> Value {
    Value::Array(ValueType::F32, v.iter().map(|&x| Value::F32(x)).collect())
}

/// A tiny byte-level BPE vocabulary: `(text, type)` plus merges, in rank order.
const BPE_TOKENS: &[(&str, i32)] = &[
    ("<|endoftext|>", 3),
    ("<|im_start|>", 3),
    ("<|im_end|>", 1), // a control token mislabelled normal: llama.cpp fixes it up
    ("<tool>", 4),
    ("ij", 4),
    ("jkl", 4),
    ("h", 1),
    ("e", 1),
    ("l", 1),
    ("o", 1),
    ("w", 1),
    ("r", 1),
    ("d", 1),
    ("a", 1),
    ("b", 1),
    ("c", 1),
    ("s", 1),
    ("i", 1),
    ("t", 1),
    ("j", 1),
    ("k", 1),
    ("'", 1),
    ("!", 1),
    ("1", 1),
    ("2", 1),
    ("3", 1),
    ("Ġ", 1),
    ("Ċ", 1),
    ("he", 1),
    ("ll", 1),
    ("hell", 1),
    ("hello", 1),
    ("Ġw", 1),
    ("or", 1),
    ("Ġwor", 1),
    ("Ġworl", 1),
    ("Ġworld", 1),
    ("aa", 1),
    ("bc", 1),
    ("'s", 1),
    ("it", 1),
    ("12", 1),
    ("123", 1),
];
const BPE_MERGES: &[&str] = &[
    "l l", "h e", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "a a", "b c", "a b", "' s", "i t",
    "1 2", "12 3",
];

fn bpe_meta(pre: &str) -> Metadata {
    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    m.insert("tokenizer.ggml.pre", Value::String(pre.into()));
    let texts: Vec<&str> = BPE_TOKENS.iter().map(|t| t.0).collect();
    let types: Vec<i32> = BPE_TOKENS.iter().map(|t| t.1).collect();
    m.insert("tokenizer.ggml.tokens", strs(&texts));
    m.insert("tokenizer.ggml.token_type", i32s(&types));
    m.insert("tokenizer.ggml.merges", strs(BPE_MERGES));
    m.insert("tokenizer.ggml.bos_token_id", Value::U32(1));
    m.insert("tokenizer.ggml.eos_token_id", Value::U32(0));
    m.insert("tokenizer.ggml.add_bos_token", Value::Bool(false));
    m
}

fn bpe(pre: &str) -> Tokenizer {
    Tokenizer::from_metadata(&bpe_meta(pre)).expect("tiny BPE vocabulary loads")
}

fn ids(t: &Tokenizer, texts: &[&str]) -> Vec<u32> {
    texts.iter().map(|s| t.token_id(s).unwrap_or_else(|| panic!("no token {s:?}"))).collect()
}

#[test]
fn bpe_merges_by_rank() {
    let t = bpe("gpt-2");
    assert_eq!(t.kind(), TokenizerKind::Bpe);
    assert_eq!(t.encode("hello world", false, false), ids(&t, &["hello", "Ġworld"]));
    // "b c" (rank 10) beats "a b" (rank 11).
    assert_eq!(t.encode("abc", false, false)[..], ids(&t, &["a", "bc"])[..]);
    // Equal ranks: leftmost first.
    assert_eq!(t.encode("aaa", false, false), ids(&t, &["aa", "a"]));
    // A character nobody knows is dropped, as in llama.cpp (no byte token for it).
    assert_eq!(t.encode("hz", false, false), ids(&t, &["h"]));
}

#[test]
fn bpe_pre_tokenizers_differ_on_digits_and_contractions() {
    let smol = bpe("smollm");
    assert_eq!(smol.pre_family(), "starcoder");
    assert_eq!(smol.encode("123", false, false), ids(&smol, &["1", "2", "3"]));
    let llama = bpe("llama-bpe");
    assert_eq!(llama.encode("123", false, false), ids(&llama, &["123"]));
    let qwen = bpe("qwen2");
    assert_eq!(qwen.encode("123", false, false), ids(&qwen, &["1", "2", "3"]));
    assert_eq!(qwen.encode("it's", false, false), ids(&qwen, &["it", "'s"]));
}

#[test]
fn special_tokens_are_partitioned_longest_first() {
    let t = bpe("gpt-2");
    let s = |x: &str| t.token_id(x).expect("token");
    assert_eq!(
        t.encode("<|im_start|>hello<|im_end|>", false, true),
        vec![s("<|im_start|>"), s("hello"), s("<|im_end|>")]
    );
    // Without parse_special control text is spelled out (here: dropped, no '<' token), but
    // user-defined tokens are still matched.
    let plain = t.encode("<|im_start|><tool>", false, false);
    assert_eq!(plain.last(), Some(&s("<tool>")));
    assert!(!plain.contains(&s("<|im_start|>")));
    // "jkl" is longer than "ij", so it wins although "ij" starts first.
    assert_eq!(t.encode("ijkl", false, false), vec![s("i"), s("jkl")]);
    assert_eq!(t.encode("ijij", false, false), vec![s("ij"), s("ij")]);
}

#[test]
fn special_ids_and_eog() {
    let t = bpe("qwen2");
    let im_end = t.token_id("<|im_end|>").expect("im_end");
    assert!(t.is_control(im_end), "text-detected EOT becomes control");
    assert_eq!(t.eot(), Some(im_end));
    assert!(t.is_eog(im_end) && t.is_eog(0) && !t.is_eog(1));
    assert_eq!(t.eog_ids(), &[0, im_end]);
    assert_eq!((t.bos(), t.eos()), (Some(1), Some(0)));
    assert!(!t.add_bos() && !t.add_eos());
    assert!(t.is_user_defined(t.token_id("<tool>").expect("tool")));

    let mut m = bpe_meta("qwen2");
    m.insert("tokenizer.ggml.add_bos_token", Value::Bool(true));
    m.insert("tokenizer.ggml.add_eos_token", Value::Bool(true));
    let t = Tokenizer::from_metadata(&m).expect("loads");
    let hello = t.token_id("hello").expect("hello");
    assert_eq!(t.encode("hello", true, true), vec![1, hello, 0]);
    assert_eq!(t.encode("hello", false, true), vec![hello]);
    assert_eq!(t.encode("", true, true), vec![1, 0]);
    assert_eq!(t.detokenize(&[1, hello, 0], true, true), b"hello");
}

#[test]
fn bpe_decode_and_pieces() {
    let t = bpe("qwen2");
    let ids = t.encode("hello world!\n", false, false);
    assert_eq!(t.decode(&ids), "hello world!\n");
    assert_eq!(t.token_to_piece(t.token_id("Ġ").expect("space")), b" ");
    assert_eq!(t.token_to_piece(t.token_id("<|im_start|>").expect("ctl")), b"<|im_start|>");
    assert_eq!(t.piece_with(1, false), b"");
    assert_eq!(t.token_to_piece(9999), b"");
    assert_eq!(t.decode(&[9999]), "");
    // clean_spaces (on for the gpt-2 pre-tokenizer, off for qwen2) drops the space before '!'.
    let ids = ids_of(&t, &["hello", "Ġ", "!"]);
    assert_eq!(t.decode(&ids), "hello !");
    assert_eq!(bpe("gpt-2").decode(&ids), "hello!");
}

fn ids_of(t: &Tokenizer, texts: &[&str]) -> Vec<u32> {
    ids(t, texts)
}

#[test]
fn unknown_pre_falls_back_to_default() {
    for pre in ["no-such-pre", ""] {
        let t = bpe(pre);
        assert!(t.pre_fallback());
        assert_eq!(t.pre_family(), "default");
        assert_eq!(t.encode("hello world", false, false), ids(&t, &["hello", "Ġworld"]));
    }
    let mut m = bpe_meta("x");
    m.insert("tokenizer.ggml.pre", Value::String("kimi-k2".into()));
    assert!(matches!(Tokenizer::from_metadata(&m), Err(TokenizerError::UnsupportedPre(_))));
}

#[test]
fn every_known_pre_tokenizer_compiles() {
    let names = [
        "default",
        "llama3",
        "llama-bpe",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "spark2_5",
        "youtu",
        "falcon",
        "mpt",
        "starcoder",
        "gpt-2",
        "jais-2",
        "gemma4",
        "sarvam-moe",
        "refact",
        "command-r",
        "qwen2",
        "qwen35",
        "stablelm2",
        "olmo",
        "dbrx",
        "smaug-bpe",
        "poro-chat",
        "chatglm-bpe",
        "glm4",
        "viking",
        "jais",
        "tekken",
        "smollm",
        "codeshell",
        "bloom",
        "gpt3-finnish",
        "exaone",
        "exaone4",
        "exaone-moe",
        "chameleon",
        "minerva-7b",
        "megrez",
        "gpt-4o",
        "llama4",
        "granite-embed-multi-97m",
        "tiny_aya",
        "trillion",
        "granite-docling",
        "bailingmoe",
        "seed-coder",
        "hunyuan",
        "hunyuan-dense",
        "ufakzeka",
        "grok-2",
        "afmoe",
        "laguna",
        "minimax-m2",
        "solar-open",
        "mellum2",
        "minicpm5",
    ];
    for name in names {
        let t = Tokenizer::from_metadata(&bpe_meta(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!t.pre_fallback(), "{name}");
        let text = "Hello world's 1234 ٣ é\u{301} 日本 🚀\t\n\n  x";
        let ids = t.encode(text, true, true);
        assert!(ids.iter().all(|&i| (i as usize) < t.vocab_size()), "{name}");
    }
}

/// A tiny SentencePiece vocabulary with byte fallback.
fn spm_meta(space_prefix: Option<bool>) -> Metadata {
    let mut texts: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    let mut scores = vec![0.0f32; 3];
    for b in 0..=255u32 {
        texts.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let normal: &[(&str, f32)] = &[
        ("▁", -1.0),
        ("h", -1.0),
        ("e", -1.0),
        ("l", -1.0),
        ("o", -1.0),
        ("▁h", -5.0),
        ("he", -3.0),
        ("ll", -2.0),
        ("llo", -4.0),
        ("hello", -1.0),
        ("▁hello", -0.5),
        ("  ", -9.0),
    ];
    for (t, s) in normal {
        texts.push((*t).into());
        types.push(1);
        scores.push(*s);
    }
    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.model", Value::String("llama".into()));
    let refs: Vec<&str> = texts.iter().map(|s| s.as_str()).collect();
    m.insert("tokenizer.ggml.tokens", strs(&refs));
    m.insert("tokenizer.ggml.token_type", i32s(&types));
    m.insert("tokenizer.ggml.scores", f32s(&scores));
    if let Some(p) = space_prefix {
        m.insert("tokenizer.ggml.add_space_prefix", Value::Bool(p));
    }
    m
}

#[test]
fn spm_merges_by_score_with_byte_fallback() {
    let t = Tokenizer::from_metadata(&spm_meta(None)).expect("tiny SPM loads");
    assert_eq!(t.kind(), TokenizerKind::Spm);
    assert!(t.add_bos() && t.add_space_prefix());
    let hello = t.token_id("▁hello").expect("▁hello");
    assert_eq!(t.encode("hello", true, true), vec![1, hello]);
    assert_eq!(t.encode("", true, true), vec![1]);
    assert_eq!(t.encode("", false, true), Vec::<u32>::new());
    // é is not in the vocabulary: UTF-8 bytes C3 A9 as byte tokens (ids 3 + byte).
    let e_acute = t.encode("é", false, false);
    assert_eq!(e_acute, vec![t.token_id("▁").expect("▁"), 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(t.decode(&e_acute), "é");
    // A space prefix again after a special token.
    assert_eq!(t.encode("<s>hello", false, true), vec![1, hello]);
    assert_eq!(t.decode(&t.encode("hello hello", false, false)), "hello hello");

    let t = Tokenizer::from_metadata(&spm_meta(Some(false))).expect("loads");
    assert_eq!(t.encode("hello", false, false), vec![t.token_id("hello").expect("hello")]);
    // Literal spaces are escaped first, so the "  " token is never produced by merging.
    assert!(!t.encode("a  b", false, false).contains(&t.token_id("  ").expect("two spaces")));
}

#[test]
fn stream_decoder_holds_back_partial_characters() {
    let t = Tokenizer::from_metadata(&spm_meta(Some(false))).expect("loads");
    let bytes = "é🦀".as_bytes().to_vec();
    let ids: Vec<u32> = bytes.iter().map(|&b| 3 + b as u32).collect();
    let mut d = t.stream_decoder();
    assert_eq!(d.push(ids[0]), "");
    assert_eq!(d.push(ids[1]), "é");
    assert_eq!(d.push(ids[2]), "");
    assert_eq!(d.push(ids[3]), "");
    assert_eq!(d.pending().len(), 2);
    assert_eq!(d.push_all(&ids[4..]), "🦀");
    // A truncated character comes out as U+FFFD on flush; invalid bytes right away.
    assert_eq!(d.push(3 + 0xF0), "");
    assert_eq!(d.flush(), "\u{FFFD}");
    assert_eq!(d.push(3 + 0xFF), "\u{FFFD}");
    assert_eq!(d.push(t.token_id("hello").expect("hello")), "hello");
}

fn expect_err(m: &Metadata) -> TokenizerError {
    match Tokenizer::from_metadata(m) {
        Ok(_) => panic!("malformed metadata accepted"),
        Err(e) => e,
    }
}

#[test]
fn malformed_metadata_is_an_error() {
    let mut m = bpe_meta("qwen2");
    m.insert("tokenizer.ggml.model", Value::String("bert".into()));
    assert!(matches!(expect_err(&m), TokenizerError::UnknownModel(s) if s == "bert"));

    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.tokens", strs(&["a"]));
    assert!(matches!(expect_err(&m), TokenizerError::MissingKey("tokenizer.ggml.model")));

    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.model", Value::String("llama".into()));
    assert!(matches!(expect_err(&m), TokenizerError::MissingKey("tokenizer.ggml.tokens")));
    m.insert("tokenizer.ggml.tokens", strs(&[]));
    assert!(matches!(expect_err(&m), TokenizerError::EmptyVocab));
    m.insert("tokenizer.ggml.tokens", i32s(&[1, 2]));
    assert!(matches!(expect_err(&m), TokenizerError::Metadata(_)));
    m.insert("tokenizer.ggml.tokens", Value::String("abc".into()));
    assert!(matches!(expect_err(&m), TokenizerError::Metadata(_)));

    let mut m = spm_meta(None);
    m.insert("tokenizer.ggml.scores", f32s(&[0.0; 10]));
    assert!(matches!(expect_err(&m), TokenizerError::LengthMismatch { key: "tokenizer.ggml.scores", .. }));
    let mut m = spm_meta(None);
    m.insert("tokenizer.ggml.token_type", i32s(&[1; 5]));
    assert!(matches!(expect_err(&m), TokenizerError::LengthMismatch { key: "tokenizer.ggml.token_type", .. }));
    let mut m = spm_meta(None);
    m.insert("tokenizer.ggml.token_type", strs(&["x"; 300]));
    assert!(matches!(expect_err(&m), TokenizerError::BadElement { index: 0, .. }));
    let mut m = spm_meta(None);
    m.insert("tokenizer.ggml.bos_token_id", Value::String("1".into()));
    assert!(matches!(expect_err(&m), TokenizerError::Metadata(_)));

    let mut m = bpe_meta("qwen2");
    m.insert("tokenizer.ggml.merges", Value::Array(ValueType::String, Vec::new()));
    assert!(Tokenizer::from_metadata(&m).is_ok(), "no merges is a valid (if useless) BPE");
    let mut m2 = Metadata::new();
    for (k, v) in m.iter().filter(|(k, _)| *k != "tokenizer.ggml.merges") {
        m2.insert(k, v.clone());
    }
    assert!(matches!(expect_err(&m2), TokenizerError::MissingKey("tokenizer.ggml.merges")));

    // add_bos_token without a usable BOS id (the gpt2 default 11 is outside a 3-token vocab).
    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    m.insert("tokenizer.ggml.tokens", strs(&["a", "b", "c"]));
    m.insert("tokenizer.ggml.merges", strs(&["a b"]));
    m.insert("tokenizer.ggml.add_bos_token", Value::Bool(true));
    assert!(matches!(expect_err(&m), TokenizerError::MissingSpecialToken { what: "BOS", .. }));
    // A BOS/EOS id past the vocabulary is a corrupt file (hardening issue, defect 12).
    m.insert("tokenizer.ggml.bos_token_id", Value::U32(7));
    assert!(
        matches!(
            expect_err(&m),
            TokenizerError::SpecialIdOutOfRange { key: "tokenizer.ggml.bos_token_id", id: 7, n_vocab: 3 }
        ),
        "out-of-range BOS id"
    );
    let mut e = bpe_meta("qwen2");
    e.insert("tokenizer.ggml.eos_token_id", Value::U32(1_000_000));
    assert!(matches!(expect_err(&e), TokenizerError::SpecialIdOutOfRange { key: "tokenizer.ggml.eos_token_id", .. }));
    // Other special ids past the vocabulary are ignored, as llama.cpp does.
    e.insert("tokenizer.ggml.eos_token_id", Value::U32(0));
    e.insert("tokenizer.ggml.padding_token_id", Value::U32(1_000_000));
    assert!(Tokenizer::from_metadata(&e).is_ok());
    m.insert("tokenizer.ggml.bos_token_id", Value::I32(-1));
    assert!(matches!(expect_err(&m), TokenizerError::MissingSpecialToken { .. }), "-1 means none");
    m.insert("tokenizer.ggml.bos_token_id", Value::U32(2));
    assert!(Tokenizer::from_metadata(&m).is_ok());

    // Odd but harmless: empty token texts, duplicate texts, merges without a space.
    let mut m = Metadata::new();
    m.insert("tokenizer.ggml.model", Value::String("gpt2".into()));
    m.insert("tokenizer.ggml.tokens", strs(&["a", "", "a", "ab"]));
    m.insert("tokenizer.ggml.merges", strs(&["ab", "a b", " x"]));
    let t = Tokenizer::from_metadata(&m).expect("tolerated");
    assert_eq!(t.token_text(1), "[EMPTY_1]");
    assert_eq!(t.encode("ab", false, false), vec![3]);
    assert_eq!(t.encode("a", false, false), vec![0]);
}

#[test]
fn tokenizer_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Tokenizer>();
}
