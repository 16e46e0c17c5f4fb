//! Differential test against a llama.cpp `llama-tokenize` binary on random, deliberately nasty
//! text (whitespace runs, CR/LF, contractions, digits in many scripts, combining marks, emoji,
//! special-token text, control characters...).
//!
//! Opt-in: set `INFR_LLAMA_TOKENIZE` to the binary (built from llama.cpp commit `0c1e57098`, the
//! oracle's version). `INFR_DIFF_CASES` sets the number of texts per model and setting (default
//! 40), `INFR_DIFF_SEED` the seed. Models come from `$INFR_TEST_MODELS` (default `<repo>/models`).
//! Without the binary the test only prints a note.

use std::path::{Path, PathBuf};
use std::process::Command;

use infr_gguf::{GgufModel, GgufWriter, Value};
use infr_tokenizer::Tokenizer;

const MODELS: [&str; 3] =
    ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"];

/// Building blocks of the random texts.
const PIECES: &[&str] = &[
    "the",
    "The",
    " quick",
    "brown",
    "FOX",
    " ",
    "  ",
    "   ",
    "    ",
    "        ",
    "\t",
    "\t\t",
    "\n",
    "\n\n",
    "\n\n\n",
    "\r\n",
    "\r",
    " \n",
    "\n ",
    " \t\n",
    "'s",
    "'S",
    "'ll",
    "'LL",
    "'re",
    "'Ve",
    "'d",
    "'m",
    "'t",
    "'x",
    "'",
    "\"",
    "don't",
    "I'M",
    "0",
    "1",
    "12",
    "123",
    "1234",
    "12345",
    "3.14",
    "-42",
    "1e-9",
    "٣٤",
    "²",
    "½",
    "Ⅻ",
    "١٢٣",
    "!",
    "?",
    "...",
    ",",
    ".",
    ";",
    ":",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "<",
    ">",
    "/",
    "\\",
    "|",
    "_",
    "-",
    "--",
    "==",
    "=>",
    "->",
    "::",
    "#",
    "@",
    "$",
    "%",
    "^",
    "&",
    "*",
    "+",
    "~",
    "`",
    "é",
    "É",
    "ß",
    "naïve",
    "Ω",
    "ωμέγα",
    "жизнь",
    "ЖИЗНЬ",
    "日本語",
    "中文",
    "한국어",
    "ไทย",
    "हिन्दी",
    "עברית",
    "العربية",
    "e\u{301}",
    "\u{301}",
    "a\u{308}\u{323}",
    "🚀",
    "🦀",
    "👨‍👩‍👧‍👦",
    "🇯🇵",
    "✨",
    "©",
    "™",
    "€",
    "\u{a0}",
    "\u{3000}",
    "\u{2028}",
    "\u{85}",
    "\u{200b}",
    "\u{feff}",
    "\u{1}",
    "\u{b}",
    "\u{c}",
    "\u{1c}",
    "\u{7f}",
    "\u{fffd}",
    "\u{e000}",
    "\u{10ffff}",
    "\u{1c89}",
    "ｆｕｌｌ",
    "１２３",
    "fn main() {",
    "    return x;",
    "<div class=\"a\">",
    "&amp;",
    "http://example.com/a?b=c",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<tool_call>",
    "</tool_call>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<eos>",
    "<bos>",
    "<unused7>",
    "<pad>",
    "<mask>",
    "[multimodal]",
    "<|fim_prefix|>",
    "<repo_name>",
    "<im_start>",
    "<|im_start",
    "▁",
    "▁▁",
    "Ġ",
    "Ċ",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_text(rng: &mut Rng) -> String {
    let n = 1 + rng.below(24);
    (0..n).map(|_| PIECES[rng.below(PIECES.len())]).collect()
}

fn llama_tokenize(bin: &Path, model: &Path, text: &str, add_special: bool, parse_special: bool, tag: &str) -> Vec<u32> {
    let file = std::env::temp_dir().join(format!("infr-tok-diff-{}-{tag}.txt", std::process::id()));
    std::fs::write(&file, text).expect("write temp file");
    let mut cmd = Command::new(bin);
    cmd.arg("-m").arg(model).arg("-f").arg(&file).args(["--ids", "--no-escape", "--log-disable"]);
    if !add_special {
        cmd.arg("--no-bos");
    }
    if !parse_special {
        cmd.arg("--no-parse-special");
    }
    let out = cmd.output().expect("run llama-tokenize");
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().rev().find(|l| l.starts_with('[')).unwrap_or_else(|| panic!("no ids in {stdout:?}"));
    serde_json::from_str(line).expect("ids are a JSON list")
}

fn setup() -> Option<(PathBuf, usize, u64, PathBuf)> {
    let Some(bin) = std::env::var_os("INFR_LLAMA_TOKENIZE").map(PathBuf::from) else {
        eprintln!("skipping: set INFR_LLAMA_TOKENIZE to a llama-tokenize binary to run the differential test");
        return None;
    };
    let n_cases: usize = std::env::var("INFR_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("INFR_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
    let dir = std::env::var_os("INFR_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models"));
    Some((bin, n_cases, seed, dir))
}

/// Tokenize `n_cases` random texts with both tokenizers; returns the mismatches.
fn compare(bin: &Path, path: &Path, tok: &Tokenizer, label: &str, n_cases: usize, seed: u64) -> Vec<String> {
    let mut rng = Rng(seed ^ label.len() as u64 ^ (label.bytes().map(u64::from).sum::<u64>() << 17));
    let cases: Vec<(String, bool, bool)> =
        (0..n_cases).map(|i| (random_text(&mut rng), i % 4 != 3, i % 2 == 0)).collect();
    let results: Vec<Vec<u32>> = std::thread::scope(|s| {
        let workers = 2;
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let cases = &cases;
                s.spawn(move || {
                    cases
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % workers == w)
                        .map(|(i, (t, a, p))| (i, llama_tokenize(bin, path, t, *a, *p, &format!("{w}-{i}"))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, Vec<u32>)> = handles.into_iter().flat_map(|h| h.join().expect("worker")).collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, ids)| ids).collect()
    });
    let mut failures = Vec::new();
    for ((text, add, parse), expected) in cases.iter().zip(&results) {
        let got = tok.encode(text, *add, *parse);
        if &got != expected {
            failures.push(format!(
                "{label}: {text:?} (add_special {add}, parse_special {parse})\n  llama.cpp {expected:?}\n  infr      {got:?}"
            ));
        }
    }
    println!("{label}: {}/{} random texts match llama.cpp", cases.len() - failures.len(), cases.len());
    failures
}

#[test]
fn random_text_matches_llama_cpp() {
    let Some((bin, n_cases, seed, dir)) = setup() else { return };
    let mut failures = Vec::new();
    for file in MODELS {
        let path = dir.join(file);
        let Ok(model) = GgufModel::open(&path) else {
            eprintln!("skipping {file}: not found");
            continue;
        };
        let tok = Tokenizer::from_metadata(model.metadata()).expect("tokenizer loads");
        failures.extend(compare(&bin, &path, &tok, file, n_cases, seed));
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

/// Other pre-tokenizers (mostly run through the generic regex engine) and a SentencePiece space
/// prefix, checked on the real vocabularies with one metadata key changed, written out as
/// tensor-less GGUF files that llama.cpp loads vocabulary-only.
#[test]
fn pre_tokenizer_variants_match_llama_cpp() {
    let Some((bin, _, seed, dir)) = setup() else { return };
    let n_cases: usize = std::env::var("INFR_DIFF_VARIANT_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(12);
    let variants: Vec<(&str, &str, Value)> = [
        "default",
        "gpt-2",
        "llama-bpe",
        "falcon",
        "deepseek-llm",
        "deepseek-coder",
        "deepseek-v3",
        "gpt-4o",
        "tekken",
        "poro-chat",
        "viking",
        "chameleon",
        "bailingmoe",
        "seed-coder",
        "exaone-moe",
        "jais-2",
        "tiny_aya",
        "afmoe",
        "minicpm5",
        "qwen35",
        "youtu",
        "spark2_5",
        "laguna",
        "ufakzeka",
        "granite-embed-multi-97m",
        "stablelm2",
        "command-r",
    ]
    .into_iter()
    .map(|p| ("qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf", "tokenizer.ggml.pre", Value::String(p.into())))
    .chain([("gemma3-270m-q4_k_m.gguf", "tokenizer.ggml.add_space_prefix", Value::Bool(true))])
    .collect();
    let mut failures = Vec::new();
    for (file, key, value) in variants {
        let Ok(model) = GgufModel::open(dir.join(file)) else {
            eprintln!("skipping {file}: not found");
            continue;
        };
        let mut w = GgufWriter::new();
        for (k, v) in model.metadata().iter() {
            w.set(k, if k == key { value.clone() } else { v.clone() });
        }
        let label = format!("{file} with {key} = {value}");
        let path = std::env::temp_dir().join(format!("infr-tok-variant-{}.gguf", std::process::id()));
        w.write(&path).expect("write variant GGUF");
        let mut meta = model.metadata().clone();
        meta.insert(key, value.clone());
        let tok = Tokenizer::from_metadata(&meta).expect("tokenizer loads");
        failures.extend(compare(&bin, &path, &tok, &label, n_cases, seed));
        let _ = std::fs::remove_file(&path);
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

/// One long document (prose, code, whitespace runs, many scripts, special-token text) per model:
/// fragment boundaries, word caching and long-range state all have to hold up over ~300 KB.
#[test]
fn long_document_matches_llama_cpp() {
    let Some((bin, _, seed, dir)) = setup() else { return };
    let mut rng = Rng(seed);
    let mut doc = String::new();
    while doc.len() < 300_000 {
        doc.push_str(&random_text(&mut rng));
        doc.push_str(match rng.below(6) {
            0 => "\n\nThe committee met on Tuesday; it didn't vote. Costs rose 12.5% to $1,234,567.\n",
            1 => {
                "\nfn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{x:?}\");\n}\n"
            }
            2 => "\n    def f(self, a=1):\n\t\treturn {'k': [a, None]}  # comment\r\n",
            _ => " ",
        });
    }
    let mut failures = Vec::new();
    for file in MODELS {
        let path = dir.join(file);
        let Ok(model) = GgufModel::open(&path) else { continue };
        let tok = Tokenizer::from_metadata(model.metadata()).expect("tokenizer loads");
        for (add, parse) in [(true, true), (false, false)] {
            let expected = llama_tokenize(&bin, &path, &doc, add, parse, "doc");
            let got = tok.encode(&doc, add, parse);
            if got != expected {
                let at = got.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(got.len().min(expected.len()));
                let lo = at.saturating_sub(5);
                failures.push(format!(
                    "{file} (add_special {add}, parse_special {parse}): first difference at token {at}\n  llama.cpp {:?}\n  infr      {:?}",
                    &expected[lo..(at + 5).min(expected.len())],
                    &got[lo..(at + 5).min(got.len())]
                ));
            } else {
                println!(
                    "{file}: {} bytes -> {} tokens, identical (add_special {add}, parse_special {parse})",
                    doc.len(),
                    got.len()
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
