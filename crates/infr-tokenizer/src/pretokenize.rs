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

pub(crate) const GPT2: &str = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
pub(crate) const LLAMA3: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
pub(crate) const QWEN2: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
pub(crate) const QWEN35: &str = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
pub(crate) const DIGIT: &str = "\\p{N}";
pub(crate) const NEWLINES: &str = "[^\\n]+|[\\n]+";
const AFMOE_DIGITS: &str = "\\p{AFMoE_digits}";
const AYA_DIGITS: &str = "\\d{1,3}(?=(?:\\d{3})*\\b)";
const DEEPSEEK3_MAIN: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
const CJK_KANA: &str = "[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+";
const PORO: &str = " ?[^(\\s|.,!?\u{2026}\u{3002}\u{FF0C}\u{3001}\u{964}\u{6D4}\u{60C})]+";
const GPT4O: &str = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/// The regexes of a llama.cpp pre-tokenizer family (`llm_tokenizer_bpe`'s constructor).
fn family_regexes(family: &str) -> Vec<&'static str> {
    match family {
        "llama3" | "dbrx" | "chatglm4" => vec![LLAMA3],
        "jais2" => vec!["(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"],
        "deepseek-llm" => vec![
            "[\r\n]",
            "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
            "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+",
            "\\s+$",
            "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+",
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
            "[\u{AC00}-\u{D7A3}\u{3131}-\u{318E}]+|[\u{FF01}\u{2026}\u{201C}\u{201D}\u{2018}\u{2019}\u{2014}\u{FF1A}\u{FF1B}\u{FF0C}\u{3001}-\u{303F}\u{FE30}-\u{FE4F}]+|[\u{3105}-\u{312F}]+|[\u{4E00}-\u{9FA5}\u{3040}-\u{309F}\u{30A0}-\u{30FF}]+",
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        ],
        "deepseek-coder" => vec!["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+", DIGIT],
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
            "[\u{4E00}-\u{9FFF}\u{3400}-\u{4DBF}\u{8C48}-\u{FAFF}\u{3040}-\u{309F}\u{30A0}-\u{30FF}\u{FF65}-\u{FF9F}\u{2F00}-\u{2FDF}\u{E40}-\u{E7F}\u{E80}-\u{EFF}\u{1780}-\u{17FF}\u{1000}-\u{109F}\u{AA60}-\u{AA7F}\u{A9E0}-\u{A9FF}\u{AC00}-\u{D7AF}\u{1100}-\u{11FF}]+",
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
            "mpt" | "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
            | "a.x-4.0" | "mellum" | "modern-bert" | "jina-v1-en" | "jina-v2-code" | "roberta-bpe" | "olmo"
            | "jais" | "exaone4" => PreConfig::base("gpt2"),
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
            "tekken" => {
                PreConfig { clean_spaces: false, ignore_merges: true, add_bos: true, ..PreConfig::base("tekken") }
            }
            "chameleon" => PreConfig { add_bos: true, clean_spaces: false, ..PreConfig::base("chameleon") },
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
                PreConfig { clean_spaces: false, ..PreConfig::base("gpt4o") }
            }
            "granite-embed-multi-97m" => {
                PreConfig { clean_spaces: false, ignore_merges: true, ..PreConfig::base("granite-emb-multi") }
            }
            "tiny_aya" | "cohere2moe" => PreConfig { clean_spaces: false, ..PreConfig::base("tiny_aya") },
            "trillion" | "granite-docling" => PreConfig { clean_spaces: false, ..PreConfig::base("gpt2") },
            "bailingmoe" | "bailingmoe2" | "llada-moe" => {
                PreConfig { clean_spaces: false, ..PreConfig::base("bailingmoe") }
            }
            "seed-coder" => PreConfig { clean_spaces: false, ..PreConfig::base("seed-coder") },
            "hunyuan-dense" | "hy_v4" | "joyai-llm" => {
                PreConfig { clean_spaces: false, ..PreConfig::base("deepseek3") }
            }
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
