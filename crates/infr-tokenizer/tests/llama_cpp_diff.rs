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

use infr_gguf::GgufModel;
use infr_tokenizer::Tokenizer;

const MODELS: [&str; 3] =
    ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"];

/// Building blocks of the random texts.
const PIECES: &[&str] = &[
    "the", "The", " quick", "brown", "FOX", " ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n",
    "\r\n", "\r", " \n", "\n ", " \t\n", "'s", "'S", "'ll", "'LL", "'re", "'Ve", "'d", "'m", "'t", "'x", "'", "\"",
    "don't", "I'M", "0", "1", "12", "123", "1234", "12345", "3.14", "-42", "1e-9", "٣٤", "²", "½", "Ⅻ", "١٢٣",
    "!", "?", "...", ",", ".", ";", ":", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "|", "_", "-", "--", "==",
    "=>", "->", "::", "#", "@", "$", "%", "^", "&", "*", "+", "~", "`", "é", "É", "ß", "naïve", "Ω", "ωμέγα",
    "жизнь", "ЖИЗНЬ", "日本語", "中文", "한국어", "ไทย", "हिन्दी", "עברית", "العربية", "e\u{301}", "\u{301}",
    "a\u{308}\u{323}", "🚀", "🦀", "👨‍👩‍👧‍👦", "🇯🇵", "✨", "©", "™", "€", "\u{a0}", "\u{3000}", "\u{2028}",
    "\u{85}", "\u{200b}", "\u{feff}", "\u{1}", "\u{b}", "\u{c}", "\u{1c}", "\u{7f}", "\u{fffd}", "\u{e000}",
    "\u{10ffff}", "\u{1c89}", "ｆｕｌｌ", "１２３", "fn main() {", "    return x;", "<div class=\"a\">", "&amp;",
    "http://example.com/a?b=c", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>",
    "<start_of_turn>", "<end_of_turn>", "<eos>", "<bos>", "<unused7>", "<pad>", "<mask>", "[multimodal]",
    "<|fim_prefix|>", "<repo_name>", "<im_start>", "<|im_start", "▁", "▁▁", "Ġ", "Ċ",
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

#[test]
fn random_text_matches_llama_cpp() {
    let Some(bin) = std::env::var_os("INFR_LLAMA_TOKENIZE").map(PathBuf::from) else {
        eprintln!("skipping: set INFR_LLAMA_TOKENIZE to a llama-tokenize binary to run the differential test");
        return;
    };
    let n_cases: usize = std::env::var("INFR_DIFF_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let seed: u64 = std::env::var("INFR_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED);
    let dir = std::env::var_os("INFR_TEST_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models"));

    let mut failures = Vec::new();
    for file in MODELS {
        let path = dir.join(file);
        let Ok(model) = GgufModel::open(&path) else {
            eprintln!("skipping {file}: not found");
            continue;
        };
        let tok = Tokenizer::from_metadata(model.metadata()).expect("tokenizer loads");
        let mut rng = Rng(seed ^ file.len() as u64);
        let cases: Vec<(String, bool, bool)> = (0..n_cases)
            .map(|i| (random_text(&mut rng), i % 4 != 3, i % 2 == 0))
            .collect();
        let results: Vec<Vec<u32>> = std::thread::scope(|s| {
            let workers = 2;
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let (cases, bin, path) = (&cases, &bin, &path);
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
        let mut ok = 0;
        for ((text, add, parse), expected) in cases.iter().zip(&results) {
            let got = tok.encode(text, *add, *parse);
            if &got == expected {
                ok += 1;
            } else {
                failures.push(format!(
                    "{file}: {text:?} (add_special {add}, parse_special {parse})\n  llama.cpp {expected:?}\n  infr      {got:?}"
                ));
            }
        }
        println!("{file}: {ok}/{} random texts match llama.cpp", cases.len());
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
