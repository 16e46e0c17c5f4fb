//! Errors raised while building a tokenizer from GGUF metadata.

/// Why a [`crate::Tokenizer`] could not be built.
///
/// Tokenizing and detokenizing never fail once a tokenizer exists; every check happens here, at
/// load time.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key has the wrong type (e.g. `tokenizer.ggml.tokens` is not an array of strings).
    #[error(transparent)]
    Metadata(#[from] infr_gguf::GgufError),
    /// A key the tokenizer cannot work without is absent.
    #[error("metadata key '{0}' is missing")]
    MissingKey(&'static str),
    /// `tokenizer.ggml.tokens` is present but empty.
    #[error("the vocabulary (tokenizer.ggml.tokens) is empty")]
    EmptyVocab,
    /// The vocabulary is larger than token ids (`u32`, llama.cpp: `i32`) can address.
    #[error("the vocabulary has {0} tokens, more than a 32-bit token id can address")]
    VocabTooLarge(usize),
    /// A per-token array (`scores`, `token_type`) is shorter than the token list.
    #[error("metadata key '{key}' has {found} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        /// The offending key.
        key: &'static str,
        /// Number of tokens.
        expected: usize,
        /// Number of entries found.
        found: usize,
    },
    /// An array element has the wrong type (e.g. a string in `tokenizer.ggml.scores`).
    #[error("metadata key '{key}': element {index} is {found}, expected {expected}")]
    BadElement {
        /// The offending key.
        key: &'static str,
        /// Index of the element.
        index: usize,
        /// What the element should be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error("unsupported tokenizer model '{0}' (supported: 'gpt2' byte-level BPE, 'llama' SentencePiece, 'gemma4')")]
    UnknownModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer llama.cpp knows but this crate does not implement.
    #[error("pre-tokenizer '{0}' is known to llama.cpp but not implemented here")]
    UnsupportedPre(String),
    /// A pre-tokenizer regular expression failed to compile.
    #[error("pre-tokenizer regex {regex:?} does not compile: {message}")]
    Regex {
        /// The regex as llama.cpp spells it.
        regex: String,
        /// The compiler's message.
        message: String,
    },
    /// `tokenizer.ggml.bos_token_id` / `eos_token_id` names a token past the vocabulary.
    #[error("{key} = {id} is outside the vocabulary of {n_vocab} tokens")]
    SpecialIdOutOfRange {
        /// The metadata key.
        key: &'static str,
        /// The id it holds.
        id: u64,
        /// Tokens in the vocabulary.
        n_vocab: usize,
    },
    /// The model asks for BOS/EOS to be added but does not say which token that is.
    #[error("{flag} is true but the model has no valid {what} token")]
    MissingSpecialToken {
        /// The `add_*_token` flag.
        flag: &'static str,
        /// `BOS` or `EOS`.
        what: &'static str,
    },
    /// Building the special-token matcher failed.
    #[error("cannot build the special-token matcher: {0}")]
    Matcher(String),
}
