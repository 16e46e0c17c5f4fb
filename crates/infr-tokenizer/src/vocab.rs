//! The vocabulary: token texts, scores, attributes and special token ids, loaded from GGUF
//! metadata the way llama.cpp's `llama_vocab::impl::load` does.

use infr_gguf::{Metadata, Value};
use rustc_hash::FxHashMap;

use crate::pretokenize::PreConfig;
use crate::TokenizerError;

/// Token attribute bits (llama.cpp's `llama_token_attr`).
pub(crate) mod attr {
    /// The token type was missing or not one llama.cpp knows.
    pub const UNDEFINED: u16 = 0;
    /// `<unk>`-style token (type 2).
    pub const UNKNOWN: u16 = 1 << 0;
    /// Unused / padding token (type 5, or a control token whose text contains `unused`).
    pub const UNUSED: u16 = 1 << 1;
    /// Ordinary token (type 1).
    pub const NORMAL: u16 = 1 << 2;
    /// Control token (type 3): `<|im_start|>`, `<bos>`...
    pub const CONTROL: u16 = 1 << 3;
    /// User-defined token (type 4): always matched literally in text.
    pub const USER_DEFINED: u16 = 1 << 4;
    /// Byte-fallback token `<0xXX>` (type 6).
    pub const BYTE: u16 = 1 << 5;
    /// Swallow whitespace to the left when matched as a special token.
    pub const LSTRIP: u16 = 1 << 7;
    /// Swallow whitespace to the right when matched as a special token.
    pub const RSTRIP: u16 = 1 << 8;
}

/// Which tokenization algorithm a vocabulary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-level BPE with merge ranks (`tokenizer.ggml.model = gpt2`, also `gemma4`).
    Bpe,
    /// SentencePiece with score-driven bigram merges and byte fallback (`tokenizer.ggml.model = llama`).
    Spm,
}

/// The special token ids (`None` where the model has none).
#[derive(Debug, Clone, Default)]
pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Everything llama.cpp's `llama_vocab` knows that tokenization depends on.
#[derive(Debug)]
pub(crate) struct Vocab {
    pub kind: TokenizerKind,
    /// `tokenizer.ggml.model` as written.
    pub model: String,
    /// `tokenizer.ggml.pre` as written (empty when absent).
    pub pre_name: String,
    /// Pre-tokenizer settings (BPE only; SPM uses [`PreConfig::spm`]).
    pub pre: PreConfig,
    pub texts: Vec<Box<str>>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u16>,
    pub token_to_id: FxHashMap<Box<[u8]>, u32>,
    pub ids: SpecialIds,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    pub clean_spaces: bool,
    pub escape_whitespaces: bool,
    /// Sorted end-of-generation ids.
    pub eog: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first (`cache_special_tokens`).
    pub special_cache: Vec<u32>,
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";

/// Candidate texts for the EOT token, in the order we prefer them when several exist.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts that always end generation (llama.cpp's EOG list).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

fn read_f32s(meta: &Metadata, key: &'static str, n: usize) -> Result<Option<Vec<f32>>, TokenizerError> {
    let Some(items) = meta.array(key)? else { return Ok(None) };
    if items.len() < n {
        return Err(TokenizerError::LengthMismatch { key, expected: n, found: items.len() });
    }
    items[..n]
        .iter()
        .enumerate()
        .map(|(index, v)| v.as_f64().map(|f| f as f32).ok_or_else(|| bad_element(key, index, "a number", v)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn read_i64s(meta: &Metadata, key: &'static str, n: usize) -> Result<Option<Vec<i64>>, TokenizerError> {
    let Some(items) = meta.array(key)? else { return Ok(None) };
    if items.len() < n {
        return Err(TokenizerError::LengthMismatch { key, expected: n, found: items.len() });
    }
    items[..n]
        .iter()
        .enumerate()
        .map(|(index, v)| v.as_i64().ok_or_else(|| bad_element(key, index, "an integer", v)))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn bad_element(key: &'static str, index: usize, expected: &'static str, v: &Value) -> TokenizerError {
    TokenizerError::BadElement { key, index, expected, found: v.type_name() }
}

fn attr_of_type(t: i64) -> u16 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => attr::UNDEFINED,
    }
}

impl Vocab {
    /// Load the vocabulary the way llama.cpp does (see the module docs of `lib.rs` for where we
    /// deliberately differ).
    pub(crate) fn from_metadata(meta: &Metadata) -> Result<Vocab, TokenizerError> {
        let model = meta.str(KEY_MODEL)?.ok_or(TokenizerError::MissingKey(KEY_MODEL))?.to_owned();
        let pre_name = meta.str("tokenizer.ggml.pre")?.unwrap_or("").to_owned();

        let mut ids = SpecialIds::default();
        let (kind, mut pre) = match model.as_str() {
            "llama" => {
                ids.bos = Some(1);
                ids.eos = Some(2);
                ids.unk = Some(0);
                (TokenizerKind::Spm, PreConfig::spm())
            }
            "gpt2" => {
                ids.bos = Some(11);
                ids.eos = Some(11);
                (TokenizerKind::Bpe, PreConfig::resolve(&pre_name)?)
            }
            "gemma4" => (TokenizerKind::Bpe, PreConfig::resolve("gemma4")?),
            other => return Err(TokenizerError::UnknownModel(other.to_owned())),
        };
        if pre.no_bos {
            ids.bos = None;
        }
        let mut add_bos = pre.add_bos;
        let mut add_eos = false;
        // SPM defaults to a space prefix, BPE to none; the key overrides both.
        let add_space_prefix = meta.bool("tokenizer.ggml.add_space_prefix")?.unwrap_or(kind == TokenizerKind::Spm);

        // Tokens, scores, types.
        let words = meta.str_array(KEY_TOKENS)?.ok_or(TokenizerError::MissingKey(KEY_TOKENS))?;
        let n = words.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocab);
        }
        if u32::try_from(n).is_err() || n > i32::MAX as usize {
            return Err(TokenizerError::VocabTooLarge(n));
        }
        let scores = read_f32s(meta, KEY_SCORES, n)?.unwrap_or_else(|| vec![0.0; n]);
        let attrs: Vec<u16> = match read_i64s(meta, KEY_TYPES, n)? {
            Some(t) => t.into_iter().map(attr_of_type).collect(),
            None => vec![attr::NORMAL; n],
        };
        let mut texts = Vec::with_capacity(n);
        let mut token_to_id = FxHashMap::with_capacity_and_hasher(n, Default::default());
        for (i, w) in words.into_iter().enumerate() {
            let text: Box<str> = if w.is_empty() { format!("[EMPTY_{i}]").into() } else { w.into() };
            // llama.cpp (this version) refuses duplicate texts; we keep the first id, which is what
            // its `emplace` would have kept.
            token_to_id.entry(Box::<[u8]>::from(text.as_bytes())).or_insert(i as u32);
            texts.push(text);
        }

        // Special ids from metadata (defaults outside the vocabulary are dropped first).
        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        for slot in [&mut ids.bos, &mut ids.eos, &mut ids.unk] {
            *slot = in_range(*slot);
        }
        type Slot = fn(&mut SpecialIds) -> &mut Option<u32>;
        let keyed: [(&str, Slot); 17] = [
            ("tokenizer.ggml.bos_token_id", |s| &mut s.bos),
            ("tokenizer.ggml.eos_token_id", |s| &mut s.eos),
            ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
            ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
            ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
            ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
            ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
            ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
            ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
            ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
            ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
            ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
            // Deprecated spellings.
            ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
            ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
            ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
        ];
        for (key, slot) in keyed {
            // An id outside the vocabulary is ignored (llama.cpp warns and keeps the default); so
            // is a negative one (some converters write -1 for "none").
            if meta.get(key).and_then(Value::as_i64).is_some_and(|v| v < 0) {
                continue;
            }
            if let Some(v) = meta.u64(key)? {
                if v < n as u64 {
                    *slot(&mut ids) = Some(v as u32);
                } else if matches!(key, "tokenizer.ggml.bos_token_id" | "tokenizer.ggml.eos_token_id") {
                    // Without a real BOS/EOS the model would run but never stop (or start)
                    // right: a corrupt file is refused instead.
                    return Err(TokenizerError::SpecialIdOutOfRange { key, id: v, n_vocab: n });
                }
            }
        }
        if let Some(b) = meta.bool("tokenizer.ggml.add_bos_token")? {
            add_bos = b;
        }
        if let Some(b) = meta.bool("tokenizer.ggml.add_eos_token")? {
            add_eos = b;
        }
        if pre.force_add_bos {
            add_bos = true;
        }
        if add_bos && ids.bos.is_none() {
            return Err(TokenizerError::MissingSpecialToken { flag: "tokenizer.ggml.add_bos_token", what: "BOS" });
        }
        if add_eos && ids.eos.is_none() {
            return Err(TokenizerError::MissingSpecialToken { flag: "tokenizer.ggml.add_eos_token", what: "EOS" });
        }
        pre.add_bos = add_bos;

        let mut v = Vocab {
            kind,
            model,
            pre_name,
            clean_spaces: pre.clean_spaces,
            escape_whitespaces: kind == TokenizerKind::Spm || pre.escape_whitespaces,
            pre,
            texts,
            scores,
            attrs,
            token_to_id,
            ids,
            add_bos,
            add_eos,
            add_space_prefix,
            eog: Vec::new(),
            special_cache: Vec::new(),
        };
        v.detect_specials();
        v.build_special_cache();
        v.apply_strip_attrs(meta)?;
        Ok(v)
    }

    /// Number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.texts.len()
    }

    /// The id of an exact token text.
    #[inline]
    pub(crate) fn lookup(&self, text: &[u8]) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    fn find_first(&self, candidates: &[&str]) -> Option<u32> {
        candidates.iter().find_map(|t| self.lookup(t.as_bytes()))
    }

    fn make_control(&mut self, id: u32) {
        self.attrs[id as usize] |= attr::CONTROL;
    }

    /// Text-based detection of EOT/EOM/FIM tokens, unused tokens and the EOG set.
    fn detect_specials(&mut self) {
        type Slot = fn(&mut SpecialIds) -> &mut Option<u32>;
        let lists: [(&[&str], Slot); 8] = [
            (EOT_TEXTS, |s| &mut s.eot),
            (EOM_TEXTS, |s| &mut s.eom),
            (FIM_PRE_TEXTS, |s| &mut s.fim_pre),
            (FIM_SUF_TEXTS, |s| &mut s.fim_suf),
            (FIM_MID_TEXTS, |s| &mut s.fim_mid),
            (FIM_PAD_TEXTS, |s| &mut s.fim_pad),
            (FIM_REP_TEXTS, |s| &mut s.fim_rep),
            (FIM_SEP_TEXTS, |s| &mut s.fim_sep),
        ];
        for (texts, slot) in lists {
            if slot(&mut self.ids).is_none() {
                if let Some(id) = self.find_first(texts) {
                    *slot(&mut self.ids) = Some(id);
                    self.make_control(id);
                }
            }
        }
        for (i, t) in self.texts.iter().enumerate() {
            let a = &mut self.attrs[i];
            if *a & attr::CONTROL != 0 && t.contains("unused") {
                *a |= attr::UNUSED;
            }
        }

        let mut eog: Vec<u32> = [self.ids.fim_pad, self.ids.fim_rep, self.ids.fim_sep].into_iter().flatten().collect();
        for t in EOG_TEXTS {
            if let Some(id) = self.lookup(t.as_bytes()) {
                eog.push(id);
                self.make_control(id);
            }
        }
        // gpt-oss: these are always rendered.
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.lookup(t.as_bytes()) {
                self.attrs[id as usize] = attr::USER_DEFINED;
            }
        }
        eog.extend([self.ids.eos, self.ids.eot, self.ids.eom].into_iter().flatten());
        eog.sort_unstable();
        eog.dedup();

        let has = |eog: &[u32], t: &str| eog.iter().find(|&&id| &*self.texts[id as usize] == t).copied();
        // o200k_harmony / solar-open: `<|end|>` is not end-of-generation there.
        if let Some(end) = has(&eog, "<|end|>") {
            let call = has(&eog, "<|call|>").is_some() || has(&eog, "<|calls|>").is_some();
            if call && (has(&eog, "<|return|>").is_some() || has(&eog, "<|flush|>").is_some()) {
                eog.retain(|&i| i != end);
                self.attrs[end as usize] = attr::USER_DEFINED;
            }
        }
        // gemma4 / paddleocr: `</s>` is not end-of-generation there.
        if has(&eog, "<|tool_response>").is_some() {
            if let Some(s) = has(&eog, "</s>") {
                eog.retain(|&i| i != s);
                self.attrs[s as usize] = attr::NORMAL;
            }
        }
        self.eog = eog;
    }

    fn build_special_cache(&mut self) {
        let mask = attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN;
        let mut cache: Vec<u32> = (0..self.len() as u32).filter(|&i| self.attrs[i as usize] & mask != 0).collect();
        // llama.cpp uses an unstable sort on length alone; ties keep id order here.
        cache.sort_by_key(|&i| std::cmp::Reverse(self.texts[i as usize].len()));
        self.special_cache = cache;
    }

    /// Per-model LSTRIP/RSTRIP attributes llama.cpp sets from the model name.
    fn apply_strip_attrs(&mut self, meta: &Metadata) -> Result<(), TokenizerError> {
        let name = meta.str("general.name")?.unwrap_or("").to_lowercase();
        let arch = meta.str("general.architecture")?.unwrap_or("");
        let pre = self.pre_name.clone();
        let any = |s: &str, subs: &[&str]| subs.iter().any(|x| s.contains(x));
        let set = |v: &mut Vocab, text: &str, bit: u16, on: bool| {
            if let Some(id) = v.lookup(text.as_bytes()) {
                let a = &mut v.attrs[id as usize];
                *a = if on { *a | bit } else { *a & !bit };
            }
        };
        if any(&pre, &["jina-v2-de", "jina-v2-es", "jina-v2-code"]) || any(arch, &["nomic-bert-moe", "jina-bert-v3"]) {
            set(self, "<mask>", attr::LSTRIP, true);
        } else if any(&name, &["phi-3", "phi3"]) {
            for i in self.special_cache.clone() {
                self.attrs[i as usize] |= attr::RSTRIP;
            }
            set(self, "</s>", attr::RSTRIP, true);
            for t in ["<unk>", "<s>", "<|endoftext|>"] {
                set(self, t, attr::RSTRIP, false);
            }
        } else if name.contains("modern-bert") {
            set(self, "[MASK]", attr::LSTRIP, true);
        }
        Ok(())
    }

    /// The `<0xXX>` byte-fallback token of one byte.
    pub(crate) fn byte_to_token_hex(&self, b: u8) -> Option<u32> {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        self.lookup(&[b'<', b'0', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize], b'>'])
    }

    /// The byte-fallback token of one byte (`<0xXX>`, else the one-byte text itself).
    pub(crate) fn byte_to_token(&self, b: u8) -> Option<u32> {
        self.byte_to_token_hex(b).or_else(|| self.lookup(&[b]))
    }
}
