//! Tokenizers and chat templates built from a GGUF file's metadata alone.
//!
//! [`Tokenizer`] reproduces llama.cpp's `llama_tokenize` and `llama_detokenize` for byte-level BPE
//! (`tokenizer.ggml.model = gpt2`, also `gemma4`) and SentencePiece (`llama`) vocabularies,
//! token for token; `chat` renders `tokenizer.chat_template` with minijinja, bounded by fuel.
//!
//! # Pipeline (as llama.cpp)
//!
//! 1. **Special tokens** (`special.rs`): control / user-defined / unknown token texts are cut out
//!    of the input longest first (only user-defined ones when `parse_special` is false).
//! 2. **SPM** (`spm.rs`): each remaining fragment gets a leading space when
//!    `tokenizer.ggml.add_space_prefix` says so (at the start and after a special token), spaces
//!    become `▁`, and characters merge by score with byte fallback.
//! 3. **BPE** (`pretokenize.rs`, `split.rs`, `bpe.rs`): each fragment is split into words by the
//!    pre-tokenizer named in `tokenizer.ggml.pre`, every word is spelled in the GPT-2 byte
//!    alphabet and merged by rank.
//!
//! # Where this differs from llama.cpp, on purpose
//!
//! * An unknown or missing `tokenizer.ggml.pre` falls back to llama.cpp's `default` pre-tokenizer
//!   ([`Tokenizer::pre_fallback`] reports it) instead of refusing to load.
//! * Duplicate token texts keep the first id instead of refusing to load.
//! * Where llama.cpp picks an EOT/FIM token by iterating a hash map, we take the first candidate
//!   in llama.cpp's own list order (so Qwen's EOT is `<|im_end|>`, not `<|endoftext|>`); the set
//!   of end-of-generation tokens is the same either way.
//! * Special tokens of equal length are tried in id order (llama.cpp's sort is unstable).
//! * A byte without a byte token (SPM) becomes UNK instead of aborting; ids outside the vocabulary
//!   decode to nothing instead of aborting.

mod bpe;
pub mod chat;
mod decode;
mod error;
mod guard;
mod pretokenize;
mod special;
mod split;
mod spm;
mod unicode;
mod unicode_table;
mod vocab;

use infr_gguf::Metadata;
use rustc_hash::FxHashMap;

pub use decode::{Decoder, StreamDecoder};
pub use error::TokenizerError;
pub use guard::SpecialGuard;
pub use vocab::TokenizerKind;

use decode::Pieces;
use special::{Fragment, Matcher};
use vocab::{attr, Vocab};

/// A tokenizer built from GGUF metadata; immutable and shareable across threads.
pub struct Tokenizer {
    vocab: Vocab,
    bpe: Option<bpe::Bpe>,
    pieces: Pieces,
    /// Special-token matcher with `parse_special = true` / `false`.
    specials: Matcher,
    user_defined: Matcher,
    /// Texts of the control tokens, for [`SpecialGuard`].
    controls: guard::ControlTexts,
}

impl Tokenizer {
    /// Build the tokenizer from `tokenizer.ggml.*` metadata.
    ///
    /// Fails (never panics) on a missing or malformed vocabulary, per-token arrays shorter than the
    /// token list, an unsupported `tokenizer.ggml.model`, a BPE model without merges, or an
    /// `add_bos_token` / `add_eos_token` without a valid id.
    pub fn from_metadata(meta: &Metadata) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::from_metadata(meta)?;
        let bpe = match vocab.kind {
            TokenizerKind::Bpe => Some(bpe::Bpe::new(meta, &vocab)?),
            TokenizerKind::Spm => None,
        };
        let pieces = Pieces::new(&vocab);
        let specials = Matcher::new(&vocab, true)?;
        let user_defined = Matcher::new(&vocab, false)?;
        let controls = guard::ControlTexts::new(&vocab)?;
        Ok(Tokenizer { vocab, bpe, pieces, specials, user_defined, controls })
    }

    /// Tokenize like `llama_tokenize(vocab, text, add_special, parse_special)`.
    ///
    /// `add_special` adds BOS / EOS where the model asks for them (`add_bos_token`,
    /// `add_eos_token`); `parse_special` turns control-token text such as `<|im_start|>` into the
    /// token instead of spelling it out (user-defined tokens are always matched).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut frags = Vec::new();
        let matcher = if parse_special { &self.specials } else { &self.user_defined };
        matcher.partition(text, &mut frags);
        self.encode_fragments(&frags, text.len(), add_special)
    }

    /// A guard for the untrusted strings of one prompt (see [`SpecialGuard`]).
    pub fn guard(&self) -> SpecialGuard<'_> {
        SpecialGuard::new(&self.controls)
    }

    /// Tokenize a rendered prompt whose untrusted parts went through `guard`: the prompt's own
    /// special-token texts become tokens (as `encode(text, add_special, true)`), while the
    /// guarded parts are tokenized as plain text (as with `parse_special = false`). Without
    /// any guarded control text this is exactly `encode(text, add_special, true)`.
    pub fn encode_guarded(&self, text: &str, add_special: bool, guard: &SpecialGuard<'_>) -> Vec<u32> {
        if guard.is_empty() {
            return self.encode(text, add_special, true);
        }
        let mut frags = Vec::new();
        self.specials.partition(text, &mut frags);
        // The template's special tokens are cut out first; each remaining stretch gets its
        // guarded texts back and is partitioned as plain text (user-defined tokens only).
        let restored: Vec<Option<String>> = frags
            .iter()
            .map(|f| match f {
                Fragment::Text(t) => guard.restore(t),
                Fragment::Token(_) => None,
            })
            .collect();
        let mut all = Vec::with_capacity(frags.len());
        let mut sub = Vec::new();
        for (f, r) in frags.iter().zip(&restored) {
            match r {
                Some(r) => {
                    self.user_defined.partition(r, &mut sub);
                    all.extend_from_slice(&sub);
                }
                None => all.push(*f),
            }
        }
        self.encode_fragments(&all, text.len(), add_special)
    }

    /// Tokenize partitioned text: special tokens as they are, text fragments by the model.
    fn encode_fragments(&self, frags: &[Fragment<'_>], text_len: usize, add_special: bool) -> Vec<u32> {
        let v = &self.vocab;
        let mut out = Vec::with_capacity(text_len / 3 + 2);
        if add_special && v.add_bos {
            out.extend(v.ids.bos);
        }
        match &self.bpe {
            None => {
                let mut scratch = spm::Scratch::default();
                let mut buf = Vec::new();
                let mut prev_special = true;
                for &f in frags {
                    match f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(t) => {
                            buf.clear();
                            if v.add_space_prefix && prev_special {
                                buf.extend_from_slice("\u{2581}".as_bytes());
                            }
                            escape_spaces(t, &mut buf);
                            spm::encode(v, &buf, &mut scratch, &mut out);
                            prev_special = false;
                        }
                    }
                }
            }
            Some(bpe) => {
                let mut scratch = bpe::Scratch::default();
                let mut words = Vec::new();
                let mut escaped = Vec::new();
                for &f in frags {
                    match f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(t) => {
                            let t = if v.escape_whitespaces {
                                escaped.clear();
                                escape_spaces(t, &mut escaped);
                                // Escaping spaces keeps the text valid UTF-8.
                                std::str::from_utf8(&escaped).unwrap_or(t)
                            } else {
                                t
                            };
                            self.encode_bpe_fragment(bpe, t, &mut words, &mut scratch, &mut out);
                        }
                    }
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.ids.eos);
        }
        out
    }

    fn encode_bpe_fragment(
        &self,
        bpe: &bpe::Bpe,
        text: &str,
        words: &mut Vec<(usize, usize)>,
        scratch: &mut bpe::Scratch,
        out: &mut Vec<u32>,
    ) {
        self.vocab.pre.split(text, words);
        // Repeated words are merged once per call.
        let mut cache: FxHashMap<&[u8], (u32, u32)> = FxHashMap::default();
        let mut store: Vec<u32> = Vec::new();
        let bytes = text.as_bytes();
        for &(a, b) in words.iter() {
            let w = &bytes[a..b];
            if let Some(&(s, n)) = cache.get(w) {
                out.extend_from_slice(&store[s as usize..(s + n) as usize]);
                continue;
            }
            let start = out.len();
            bpe.encode_word(&self.vocab, w, scratch, out);
            let s = store.len() as u32;
            store.extend_from_slice(&out[start..]);
            cache.insert(w, (s, (out.len() - start) as u32));
        }
    }

    /// Detokenize `ids` into text: llama.cpp's `llama_detokenize(ids, remove_special = false,
    /// unparse_special = true)`, so control tokens appear as their text (`<|im_end|>`), BOS/EOS
    /// are kept, a SentencePiece space prefix is removed from the first token, and the model's
    /// `clean_spaces` rule (if any) is applied. Bytes that do not form UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.detokenize(ids, false, true)).into_owned()
    }

    /// llama.cpp's `llama_detokenize` with both options, as raw bytes: `remove_special` drops a
    /// leading BOS / trailing EOS the model adds itself; `unparse_special` renders control and
    /// unknown tokens as their text (otherwise as nothing).
    pub fn detokenize(&self, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
        decode::detokenize(self, ids, remove_special, unparse_special)
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The bytes of one token (llama.cpp's `token_to_piece` with `special = true`): byte tokens
    /// give their byte, the GPT-2 byte alphabet is undone, SentencePiece `▁` becomes a space,
    /// control tokens give their text. Empty for ids outside the vocabulary.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        self.pieces.get(id).to_vec()
    }

    /// Like [`Tokenizer::token_to_piece`], borrowed; `special = false` renders control and unknown
    /// tokens as nothing.
    pub fn piece_with(&self, id: u32, special: bool) -> &[u8] {
        let a = self.attr(id);
        if !special && a & (attr::CONTROL | attr::UNKNOWN) != 0 {
            return &[];
        }
        self.pieces.get(id)
    }

    /// A streaming decoder over this tokenizer (control tokens rendered as text).
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    fn attr(&self, id: u32) -> u16 {
        self.vocab.attrs.get(id as usize).copied().unwrap_or(attr::UNDEFINED)
    }

    /// The token's text as stored in the vocabulary (`Ġhello`, `▁hello`, `<0x0A>`); empty for
    /// ids outside it.
    pub fn token_text(&self, id: u32) -> &str {
        self.vocab.texts.get(id as usize).map_or("", |t| t)
    }

    /// The id of an exact vocabulary text (as stored, e.g. `<|im_end|>` or `Ġthe`).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.lookup(text.as_bytes())
    }

    /// The token's score (SentencePiece log-probability; 0 where the model has none).
    pub fn token_score(&self, id: u32) -> f32 {
        self.vocab.scores.get(id as usize).copied().unwrap_or(0.0)
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<u32> {
        self.vocab.ids.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<u32> {
        self.vocab.ids.eos
    }

    /// End-of-turn token (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>`...), from metadata or
    /// detected by text like llama.cpp does.
    pub fn eot(&self) -> Option<u32> {
        self.vocab.ids.eot
    }

    /// End-of-message token (`<|eom_id|>`).
    pub fn eom(&self) -> Option<u32> {
        self.vocab.ids.eom
    }

    /// Unknown token.
    pub fn unk(&self) -> Option<u32> {
        self.vocab.ids.unk
    }

    /// Padding token.
    pub fn pad(&self) -> Option<u32> {
        self.vocab.ids.pad
    }

    /// Fill-in-the-middle tokens `(prefix, suffix, middle)`.
    pub fn fim(&self) -> (Option<u32>, Option<u32>, Option<u32>) {
        let i = &self.vocab.ids;
        (i.fim_pre, i.fim_suf, i.fim_mid)
    }

    /// All end-of-generation tokens, ascending (llama.cpp's `special_eog_ids`: EOS, EOT, EOM,
    /// FIM pad/repo/file-separator and tokens such as `<|im_end|>`, `<end_of_turn>`,
    /// `<|endoftext|>` recognised by their text).
    pub fn eog_ids(&self) -> &[u32] {
        &self.vocab.eog
    }

    /// Whether generation should stop at this token.
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.binary_search(&id).is_ok()
    }

    /// Whether the token is a control token (after llama.cpp's text-based corrections).
    pub fn is_control(&self, id: u32) -> bool {
        self.attr(id) & attr::CONTROL != 0
    }

    /// Whether the token is a user-defined token (matched literally in text).
    pub fn is_user_defined(&self, id: u32) -> bool {
        self.attr(id) & attr::USER_DEFINED != 0
    }

    /// Whether the token is a byte-fallback token (`<0x0A>`).
    pub fn is_byte(&self, id: u32) -> bool {
        self.attr(id) & attr::BYTE != 0
    }

    /// Whether `encode(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether SentencePiece text gets a leading space (`tokenizer.ggml.add_space_prefix`).
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }

    /// The algorithm: BPE or SentencePiece.
    pub fn kind(&self) -> TokenizerKind {
        self.vocab.kind
    }

    /// `tokenizer.ggml.model` as written in the file (`gpt2`, `llama`, `gemma4`).
    pub fn model(&self) -> &str {
        &self.vocab.model
    }

    /// `tokenizer.ggml.pre` as written in the file (empty when absent).
    pub fn pre(&self) -> &str {
        &self.vocab.pre_name
    }

    /// The llama.cpp pre-tokenizer family actually used (`qwen2`, `llama3`, `starcoder` for
    /// `smollm`, `default`...; `spm` for SentencePiece).
    pub fn pre_family(&self) -> &'static str {
        self.vocab.pre.family
    }

    /// True when `tokenizer.ggml.pre` was missing or unknown and llama.cpp's `default`
    /// pre-tokenizer is used instead.
    pub fn pre_fallback(&self) -> bool {
        self.vocab.pre.fallback
    }

    /// One-line description for `infr inspect`.
    pub fn summary(&self) -> String {
        let v = &self.vocab;
        let kind = match v.kind {
            TokenizerKind::Bpe => "BPE",
            TokenizerKind::Spm => "SPM",
        };
        let name = |id: Option<u32>| match id {
            Some(i) => format!("{i} {:?}", self.token_text(i)),
            None => "-".to_owned(),
        };
        let merges = self.bpe.as_ref().map(|b| format!(", {} merges", b.n_merges())).unwrap_or_default();
        let pre = if v.pre.fallback {
            format!("pre '{}' unknown, using 'default'", v.pre_name)
        } else if v.kind == TokenizerKind::Bpe {
            format!("pre '{}' ({})", v.pre_name, v.pre.family)
        } else {
            "no pre-tokenizer".to_owned()
        };
        format!(
            "{kind} ({}), {} tokens{merges}, {pre}; bos {}, eos {}, eot {}, {} end-of-generation ids, add_bos {}",
            v.model,
            v.len(),
            name(v.ids.bos),
            name(v.ids.eos),
            name(v.ids.eot),
            v.eog.len(),
            v.add_bos
        )
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({})", self.summary())
    }
}

/// Replace every space with `▁` (U+2581), appending to `out`.
fn escape_spaces(text: &str, out: &mut Vec<u8>) {
    for (i, part) in text.split(' ').enumerate() {
        if i > 0 {
            out.extend_from_slice("\u{2581}".as_bytes());
        }
        out.extend_from_slice(part.as_bytes());
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_split;
