//! Pre-tokenizer selection: `tokenizer.ggml.pre` -> the regex stages and flags llama.cpp uses.
//!
//! Names are resolved exactly as in llama.cpp's `llama_vocab::impl::load`. A missing or unknown
//! name falls back to llama.cpp's `default` pre-tokenizer (llama.cpp itself refuses unknown names;
//! we prefer to load and report the fallback through [`crate::Tokenizer::pre_fallback`]).

use crate::split::{self, GenericRegex, Piece, Text};
use crate::TokenizerError;

/// One splitting stage.
#[derive(Debug)]
pub(crate) enum Stage {
    /// The GPT-2 regex (hand-written splitter).
    Gpt2,
    /// llama3 (`max_digits = 3`), qwen2 (`1`), qwen35 (`1`, with marks).
    Words { max_digits: usize, marks: bool },
    /// `\p{N}`: isolate every number.
    Digits,
    /// `[^\n]+|[\n]+`.
    Newlines,
    /// Digit runs cut into groups of three from the right (AFMoE, tiny_aya).
    DigitGroups,
    /// Any other regex.
    Regex(Box<GenericRegex>),
}

/// Pre-tokenizer settings of a vocabulary.
#[derive(Debug)]
pub(crate) struct PreConfig {
    /// The llama.cpp pre-tokenizer family in use (`default` after a fallback).
    pub family: &'static str,
    pub stages: Vec<Stage>,
    /// Words are spelled in the GPT-2 byte alphabet before merging.
    pub byte_encode: bool,
    /// A word that is itself a token is not merged (llama3 and friends).
    pub ignore_merges: bool,
    pub clean_spaces: bool,
    /// Default for `add_bos` before `tokenizer.ggml.add_bos_token` is read.
    pub add_bos: bool,
    /// Gemma 4: BOS is added whatever the metadata says.
    pub force_add_bos: bool,
    /// chatglm: no default BOS id.
    pub no_bos: bool,
    /// Spaces become `▁` before BPE (gemma4-style BPE).
    pub escape_whitespaces: bool,
    /// Gemma 4: a word of only newlines is looked up whole before merging.
    pub newline_words: bool,
    /// `tokenizer.ggml.pre` was missing or unknown and `default` is used instead.
    pub fallback: bool,
}

const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const DIGIT: &str = "\\p{N}";
const NEWLINES: &str = "[^\\n]+|[\\n]+";
const AFMOE_DIGITS: &str = "\\p{AFMoE_digits}";
const AYA_DIGITS: &str = "\\d{1,3}(?=(?:\\d{3})*\\b)";
const DEEPSEEK3_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const CJK_KANA: &str = "[一-龥぀-ゟ゠-ヿ]+";
const PORO: &str = " ?[^(\\s|.,!?…。，、।۔،)]+";
const GPT4O: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// The regexes of a llama.cpp pre-tokenizer family (`llm_tokenizer_bpe`'s constructor).
fn family_regexes(family: &str) -> Vec<&'static str> {
    match family {
        "llama3" | "dbrx" | "chatglm4" => vec![LLAMA3],
        "jais2" => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"],
        "deepseek-llm" => vec![
            "[\r\n]",
            "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
            "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
            "\\s+$",
            "[一-龥ࠀ-一가-퟿]+",
            "\\p{N}+",
        ],
        "deepseek3" => vec!["\\p{N}{1,3}", CJK_KANA, DEEPSEEK3_MAIN],
        "spark2_5" => vec![
            "\\p{N}{1,3}",
            CJK_KANA,
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
            DIGIT,
        ],
        "youtu" => vec![
            "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        "deepseek-coder" => vec!["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", DIGIT],
        "falcon" => vec!["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2, "[0-9][0-9][0-9]"],
        "starcoder" => vec![DIGIT, GPT2],
        "gpt2" => vec![GPT2],
        "qwen2" => vec![QWEN2],
        "qwen35" => vec![QWEN35],
        "poro" => vec![PORO],
        "viking" => vec![PORO, DIGIT],
        "tekken" => vec!["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        "chameleon" => vec![
            "<sentinel:[0-9]+>",
            "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            "([\\t\\n]|    |  )",
            DIGIT,
            "[\\p{P}!-/:-@\\[-`{-~]",
            GPT2,
        ],
        "gpt4o" => vec![GPT4O],
        "granite-emb-multi" => vec!["[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        "tiny_aya" => vec![
            AYA_DIGITS,
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        "bailingmoe" => vec!["'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
        "seed-coder" => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        "ufakzeka" => vec!["[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"],
        "afmoe" => vec![
            AFMOE_DIGITS,
            "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        "laguna" => vec![NEWLINES, QWEN2],
        "exaone-moe" => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"],
        "gemma4" => vec![NEWLINES],
        "minicpm5" => vec![
            "\\p{N}{1,3}",
            "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        _ => vec!["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
    }
}

fn stage_of(regex: &str) -> Result<Stage, TokenizerError> {
    Ok(match regex {
        GPT2 => Stage::Gpt2,
        LLAMA3 => Stage::Words { max_digits: 3, marks: false },
        QWEN2 => Stage::Words { max_digits: 1, marks: false },
        QWEN35 => Stage::Words { max_digits: 1, marks: true },
        DIGIT => Stage::Digits,
        NEWLINES => Stage::Newlines,
        AFMOE_DIGITS | AYA_DIGITS => Stage::DigitGroups,
        other => Stage::Regex(Box::new(
            GenericRegex::compile(other)
                .map_err(|message| TokenizerError::Regex { regex: other.to_owned(), message })?,
        )),
    })
}

impl PreConfig {
    fn base(family: &'static str) -> PreConfig {
        PreConfig {
            family,
            stages: Vec::new(),
            byte_encode: true,
            ignore_merges: false,
            clean_spaces: true,
            add_bos: false,
            force_add_bos: false,
            no_bos: false,
            escape_whitespaces: false,
            newline_words: false,
            fallback: false,
        }
    }

    /// Settings of a SentencePiece vocabulary (no pre-tokenizer).
    pub(crate) fn spm() -> PreConfig {
        PreConfig { clean_spaces: false, add_bos: true, ..PreConfig::base("spm") }
    }

    /// Resolve a BPE `tokenizer.ggml.pre` name.
    pub(crate) fn resolve(name: &str) -> Result<PreConfig, TokenizerError> {
        let mut c = match name {
            "default" => PreConfig::base("default"),
            "minicpm5" => PreConfig { ignore_merges: true, ..PreConfig::base("minicpm5") },
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
            | "jina-v5-nano" => PreConfig { ignore_merges: true, add_bos: true, ..PreConfig::base("llama3") },
            "deepseek-llm" | "deepseek-coder" | "deepseek-v3" | "spark2_5" => {
                let family = match name {
                    "deepseek-v3" => "deepseek3",
                    other => match other {
                        "deepseek-llm" => "deepseek-llm",
                        "deepseek-coder" => "deepseek-coder",
                        _ => "spark2_5",
                    },
                };
                PreConfig { clean_spaces: false, ..PreConfig::base(family) }
            }
            "youtu" => PreConfig { clean_spaces: false, ignore_merges: true, ..PreConfig::base("youtu") },
            "falcon" => PreConfig::base("falcon"),
            "mpt" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de" | "a.x-4.0"
            | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "olmo" | "jais"
            | "exaone4" => PreConfig::base("gpt2"),
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => PreConfig::base("starcoder"),
            "command-r" | "smollm" => PreConfig { clean_spaces: false, ..PreConfig::base("starcoder") },
            "jais-2" => PreConfig::base("jais2"),
            "gemma4" | "granite-embed-multi-311m" => PreConfig {
                escape_whitespaces: true,
                byte_encode: false,
                force_add_bos: true,
                newline_words: true,
                ..PreConfig::base("gemma4")
            },
            "sarvam-moe" => PreConfig {
                escape_whitespaces: true,
                byte_encode: false,
                clean_spaces: false,
                ..PreConfig::base("gemma4")
            },
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "grok-2" | "solar-open" => {
                PreConfig { clean_spaces: false, ..PreConfig::base("qwen2") }
            }
            "megrez" | "stablelm2" => PreConfig::base("qwen2"),
            "qwen35" => PreConfig { clean_spaces: false, ..PreConfig::base("qwen35") },
            "dbrx" | "smaug-bpe" => PreConfig::base("dbrx"),
            "poro-chat" => PreConfig { clean_spaces: false, ..PreConfig::base("poro") },
            "bloom" | "gpt3-finnish" => PreConfig::base("poro"),
            "chatglm-bpe" => PreConfig { no_bos: true, ..PreConfig::base("chatglm4") },
            "glm4" | "glm5" => PreConfig { no_bos: true, ignore_merges: true, ..PreConfig::base("chatglm4") },
            "viking" => PreConfig { clean_spaces: false, ..PreConfig::base("viking") },
            "tekken" => PreConfig { clean_spaces: false, ignore_merges: true, add_bos: true, ..PreConfig::base("tekken") },
            "chameleon" => PreConfig { add_bos: true, clean_spaces: false, ..PreConfig::base("chameleon") },
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
                PreConfig { clean_spaces: false, ..PreConfig::base("gpt4o") }
            }
            "granite-embed-multi-97m" => {
                PreConfig { clean_spaces: false, ignore_merges: true, ..PreConfig::base("granite-emb-multi") }
            }
            "tiny_aya" | "cohere2moe" => PreConfig { clean_spaces: false, ..PreConfig::base("tiny_aya") },
            "trillion" | "granite-docling" => PreConfig { clean_spaces: false, ..PreConfig::base("gpt2") },
            "bailingmoe" | "bailingmoe2" | "llada-moe" => PreConfig { clean_spaces: false, ..PreConfig::base("bailingmoe") },
            "seed-coder" => PreConfig { clean_spaces: false, ..PreConfig::base("seed-coder") },
            "hunyuan-dense" | "hy_v4" | "joyai-llm" => PreConfig { clean_spaces: false, ..PreConfig::base("deepseek3") },
            "ufakzeka" => PreConfig { clean_spaces: false, ..PreConfig::base("ufakzeka") },
            "afmoe" => PreConfig { clean_spaces: false, ..PreConfig::base("afmoe") },
            "laguna" => PreConfig { clean_spaces: false, ..PreConfig::base("laguna") },
            "exaone-moe" => PreConfig::base("exaone-moe"),
            "kimi-k2" | "superbpe" | "whitespace" => return Err(TokenizerError::UnsupportedPre(name.to_owned())),
            _ => PreConfig { fallback: true, ..PreConfig::base("default") },
        };
        c.stages = family_regexes(c.family).into_iter().map(stage_of).collect::<Result<_, _>>()?;
        Ok(c)
    }

    /// Split a fragment into words (byte ranges of `text`).
    pub(crate) fn split(&self, text: &str, words: &mut Vec<(usize, usize)>) {
        words.clear();
        if text.is_empty() {
            return;
        }
        let t = Text::new(text);
        let mut pieces: Vec<Piece> = vec![(0, t.cpts.len() as u32)];
        let mut next = Vec::with_capacity(t.cpts.len() / 3 + 4);
        for stage in &self.stages {
            next.clear();
            match stage {
                Stage::Gpt2 => split::split_gpt2(&t, &pieces, &mut next),
                Stage::Words { max_digits, marks } => split::split_words(&t, &pieces, *max_digits, *marks, &mut next),
                Stage::Digits => split::split_digits(&t, &pieces, &mut next),
                Stage::Newlines => split::split_newlines(&t, &pieces, &mut next),
                Stage::DigitGroups => split::split_digit_groups(&t, &pieces, &mut next),
                Stage::Regex(re) => re.split(&t, &pieces, &mut next),
            }
            std::mem::swap(&mut pieces, &mut next);
        }
        words.extend(pieces.into_iter().map(|p| t.bytes(p)));
    }
}
