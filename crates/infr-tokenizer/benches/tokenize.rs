//! Tokenizer throughput: encode and decode about 1 MB of mixed English / code / non-Latin text
//! with each model found in `$INFR_TEST_MODELS` (default `<repo>/models`).
//!
//! `cargo bench -p infr-tokenizer --bench tokenize` (a plain `harness = false` timer: best of 5).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use infr_gguf::GgufModel;
use infr_tokenizer::Tokenizer;

const MODELS: [&str; 3] =
    ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"];

const PROSE: &str = "The committee met on Tuesday to review the proposal. After a long discussion, \
they agreed that the budget for the next quarter would increase by 12.5%, mostly to cover the \
costs of the new data centre in Frankfurt. Nobody expected the vote to be unanimous; it wasn't. \
\"We'll revisit this in March,\" said the chair, who'd been arguing for a smaller increase.\n\n";

const CODE: &str = r#"fn parse_header(buf: &[u8]) -> Result<Header, ParseError> {
    if buf.len() < 16 {
        return Err(ParseError::Truncated { needed: 16, got: buf.len() });
    }
    let magic = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    let version = u32::from_le_bytes(buf[4..8].try_into()?);
    Ok(Header { magic, version, n_tensors: read_u64(&buf[8..16]) })
}

def moving_average(values, window=3):
    """Return the moving average of `values` over `window` items."""
    out = []
    for i in range(len(values) - window + 1):
        out.append(sum(values[i:i + window]) / window)
    return out

"#;

const OTHER: &str = "Grüße aus Zürich — naïve café. Ελληνικά και русский текст. 日本語のテキストと中文文本。\
 한국어 문장입니다. Emoji: 🚀🦀✨ 👨‍👩‍👧 and <b>HTML</b> &amp; {\"json\": [1, 2, 3]}\n";

fn corpus(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 4096);
    let mut i = 0u64;
    while s.len() < bytes {
        // Vary numbers and identifiers so repeated blocks are not byte-identical.
        s.push_str(&PROSE.replace("12.5", &format!("{}.{}", i % 97, i % 10)));
        s.push_str(&CODE.replace("parse_header", &format!("parse_header_{i}")));
        if i % 3 == 0 {
            s.push_str(OTHER);
        }
        i += 1;
    }
    s
}

/// Text with little repetition: random words over several scripts, numbers and punctuation.
fn random_corpus(bytes: usize) -> String {
    const SYLLABLES: &[&str] = &[
        "ka", "to", "ri", "mu", "sen", "de", "la", "qu", "ix", "zo", "ber", "th", "ng", "é", "ü", "ß", "ка", "ни",
        "ще", "αλ", "ου", "日", "本", "中", "文", "한", "국", "ไท", "ab", "Cl", "MA", "_", "x", "y",
    ];
    const SEPS: &[&str] =
        &[" ", " ", " ", " ", ", ", ". ", "\n", "\n\n", "    ", "\t", "(", ") ", " = ", "; ", "::", "'s "];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut s = String::with_capacity(bytes + 64);
    while s.len() < bytes {
        if next(9) == 0 {
            s.push_str(&(next(100_000)).to_string());
        } else {
            for _ in 0..1 + next(4) {
                s.push_str(SYLLABLES[next(SYLLABLES.len())]);
            }
        }
        s.push_str(SEPS[next(SEPS.len())]);
    }
    s
}

fn best_of<T>(n: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..n {
        let t = Instant::now();
        let r = f();
        best = best.min(t.elapsed());
        last = Some(r);
    }
    (best, last.expect("n > 0"))
}

fn main() {
    let dir = std::env::var_os("INFR_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    let corpora = [("mixed prose/code", corpus(1 << 20)), ("random words", random_corpus(1 << 20))];
    for (name, text) in &corpora {
        println!("corpus '{name}': {} bytes", text.len());
    }
    for file in MODELS {
        let path = dir.join(file);
        let Ok(model) = GgufModel::open(&path) else {
            println!("{file}: not found, skipped");
            continue;
        };
        let t0 = Instant::now();
        let tok = match Tokenizer::from_metadata(model.metadata()) {
            Ok(t) => t,
            Err(e) => {
                println!("{file}: {e}");
                continue;
            }
        };
        println!("{file}: tokenizer built in {:.0} ms", t0.elapsed().as_secs_f64() * 1e3);
        for (name, text) in &corpora {
            let mb = text.len() as f64 / 1e6;
            let (enc, ids) = best_of(5, || tok.encode(text, false, true));
            let (dec, back) = best_of(5, || tok.decode(&ids));
            assert_eq!(&back, text, "{file}: decode does not round-trip");
            println!(
                "  {name:>16}: encode {:6.1} ms = {:5.1} MB/s ({} tokens, {:.2} bytes/token) | decode {:.1} ms = {:.0} MB/s",
                enc.as_secs_f64() * 1e3,
                mb / enc.as_secs_f64(),
                ids.len(),
                text.len() as f64 / ids.len() as f64,
                dec.as_secs_f64() * 1e3,
                mb / dec.as_secs_f64(),
            );
        }
        for (name, text) in [("1 MB of spaces", " ".repeat(1 << 20)), ("1 MB of newlines", "\n".repeat(1 << 20))] {
            let t = Instant::now();
            let n = tok.encode(&text, false, true).len();
            println!("  {name:>16}: encode {:6.1} ms ({n} tokens)", t.elapsed().as_secs_f64() * 1e3);
        }
    }
}
