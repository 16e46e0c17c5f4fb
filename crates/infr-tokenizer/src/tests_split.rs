//! Cross-checks of the hand-written splitters and the special-token partitioner against
//! straightforward reference implementations, on random text.

use crate::pretokenize::{DIGIT, GPT2, LLAMA3, NEWLINES, QWEN2, QWEN35};
use crate::special::{Fragment, Matcher};
use crate::split::{self, GenericRegex, Piece, Text};
use crate::vocab::Vocab;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const ATOMS: &[&str] = &[
    "a",
    "Z",
    "é",
    "ж",
    "日",
    "ไ",
    "\u{301}",
    "\u{93f}",
    "1",
    "٣",
    "²",
    "Ⅻ",
    " ",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\u{a0}",
    "\u{3000}",
    "\u{85}",
    "\u{2028}",
    "'",
    "'s",
    "'S",
    "'ll",
    "'Re",
    "'x",
    "!",
    ".",
    "$",
    "+",
    "<",
    "`",
    "_",
    "🚀",
    "\u{200d}",
    "\u{1}",
    "\u{1c}",
    "\u{e000}",
    "\u{1c89}",
    "\u{10ffff}",
    "-",
    "/",
    "\\",
];

fn random_text(rng: &mut Rng, len: usize) -> String {
    (0..len).map(|_| rng.pick(ATOMS)).collect()
}

fn run(text: &str, f: impl Fn(&Text, &[Piece], &mut Vec<Piece>)) -> Vec<Piece> {
    let t = Text::new(text);
    let mut out = Vec::new();
    f(&t, &[(0, t.cpts.len() as u32)], &mut out);
    out
}

/// The hand-written splitters agree with the regexes they stand for, run through the generic
/// (std::regex-like) engine.
#[test]
fn custom_splitters_match_their_regexes() {
    type Splitter = Box<dyn Fn(&Text, &[Piece], &mut Vec<Piece>)>;
    let cases: [(&str, Splitter); 6] = [
        (GPT2, Box::new(split::split_gpt2)),
        (LLAMA3, Box::new(|t, p, o| split::split_words(t, p, 3, false, o))),
        (QWEN2, Box::new(|t, p, o| split::split_words(t, p, 1, false, o))),
        (QWEN35, Box::new(|t, p, o| split::split_words(t, p, 1, true, o))),
        (DIGIT, Box::new(split::split_digits)),
        (NEWLINES, Box::new(split::split_newlines)),
    ];
    let mut rng = Rng(0x1234_5678);
    for (regex, custom) in &cases {
        let generic = GenericRegex::compile(regex).expect("compiles");
        for i in 0..400 {
            let text = random_text(&mut rng, 1 + i % 40);
            let a = run(&text, custom);
            let b = run(&text, |t, p, o| generic.split(t, p, o));
            assert_eq!(a, b, "regex {regex:?} on {text:?}");
        }
    }
}

/// llama.cpp's partitioning, written the way llama.cpp writes it: token by token (longest
/// first), cutting every remaining text fragment at each occurrence.
fn reference_partition<'a>(vocab: &Vocab, text: &'a str, parse_special: bool) -> Vec<Fragment<'a>> {
    use crate::vocab::attr;
    let mut frags = vec![Fragment::Text(text)];
    for &id in &vocab.special_cache {
        let a = vocab.attrs[id as usize];
        if !parse_special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let pat = &*vocab.texts[id as usize];
        let mut next = Vec::new();
        for f in frags {
            let Fragment::Text(mut rest) = f else {
                next.push(f);
                continue;
            };
            while let Some(p) = rest.find(pat) {
                let mut left = &rest[..p];
                if a & attr::LSTRIP != 0 {
                    left = left.trim_end_matches([' ', '\t', '\n', '\r', '\u{b}', '\u{c}']);
                }
                if !left.is_empty() {
                    next.push(Fragment::Text(left));
                }
                next.push(Fragment::Token(id));
                rest = &rest[p + pat.len()..];
                if a & attr::RSTRIP != 0 {
                    rest = rest.trim_start_matches([' ', '\t', '\n', '\r', '\u{b}', '\u{c}']);
                }
            }
            if !rest.is_empty() {
                next.push(Fragment::Text(rest));
            }
        }
        frags = next;
    }
    frags
}

#[test]
fn partition_matches_reference() {
    use infr_gguf::{Metadata, Value, ValueType};
    let specials = ["<a>", "<ab>", "ab>", "b><", "<", "aa", "aaa", "  ", "\n\n", "x<a>", "<|im|>"];
    let mut texts: Vec<&str> = vec!["<unk>", "a", "b"];
    texts.extend(specials);
    let types: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, _)| {
            Value::I32(match i {
                0 => 2,
                1 | 2 => 1,
                i if i % 2 == 0 => 3,
                _ => 4,
            })
        })
        .collect();
    for strip in [false, true] {
        let mut m = Metadata::new();
        m.insert("tokenizer.ggml.model", Value::String("llama".into()));
        m.insert(
            "tokenizer.ggml.tokens",
            Value::Array(ValueType::String, texts.iter().map(|s| Value::String((*s).into())).collect()),
        );
        m.insert("tokenizer.ggml.token_type", Value::Array(ValueType::I32, types.clone()));
        if strip {
            // llama.cpp gives every special token RSTRIP for Phi-3.
            m.insert("general.name", Value::String("Phi-3 mini".into()));
        }
        let vocab = Vocab::from_metadata(&m).expect("vocab");
        let mut rng = Rng(0xABCD + strip as u64);
        let atoms = ["<", ">", "a", "b", "|", "i", "m", "x", " ", "\n", "<a>", "<ab>", "aa", "<|im|>"];
        for (parse_special, rare) in [(true, 64), (false, 64), (true, 0), (false, 0), (true, 2)] {
            // `rare` 0 forces the direct search for every token, 2 mixes both paths.
            let mut matcher = Matcher::new(&vocab, parse_special).expect("matcher");
            matcher.rare = rare;
            for i in 0..500 {
                let text: String = (0..1 + i % 30).map(|_| rng.pick(&atoms)).collect();
                let mut got = Vec::new();
                matcher.partition(&text, &mut got);
                let want = reference_partition(&vocab, &text, parse_special);
                assert_eq!(got, want, "{text:?} parse_special {parse_special} strip {strip} rare {rare}");
            }
        }
    }
}
