//! Keeping untrusted text from becoming control tokens.
//!
//! A chat prompt is rendered by the template and then tokenized with special-token parsing on,
//! so that the template's own `<|im_start|>` or `<start_of_turn>` become single control tokens.
//! Text that came from a client (message content, tool results, tool-call arguments, tool
//! definitions) must not get that treatment, or a message could close its turn and open a
//! `system` one. [`SpecialGuard`] marks such text before rendering: every occurrence of a
//! control token's text in it is replaced by a placeholder character from Unicode's
//! supplementary private use area B (which no tokenizer maps to a control token, and which
//! templates pass through unchanged), and [`crate::Tokenizer::encode_guarded`] turns each
//! placeholder back into its text after the special tokens of the rendered prompt were cut out,
//! so the text is tokenized as plain text. Characters of that range already present in the
//! input get placeholders of their own, so every input comes back unchanged.
//!
//! Only control (and unknown) tokens are guarded: user-defined tokens such as Qwen's
//! `<tool_call>` are matched in any text, with or without special-token parsing, exactly as
//! llama.cpp does, so templates that test `content.startswith('<tool_response>')` still work.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::vocab::{attr, Vocab};
use crate::TokenizerError;

/// First placeholder character (U+100000, supplementary private use area B).
const FIRST: u32 = 0x10_0000;
/// Last usable placeholder character (U+10FFFD; U+10FFFE/F are non-characters).
const LAST: u32 = 0x10_FFFD;

/// Finds the texts of a vocabulary's control tokens (longest match first).
#[derive(Debug)]
pub(crate) struct ControlTexts {
    ac: Option<AhoCorasick>,
}

impl ControlTexts {
    pub(crate) fn new(vocab: &Vocab) -> Result<Self, TokenizerError> {
        let texts: Vec<&str> = vocab
            .special_cache
            .iter()
            .filter(|&&id| vocab.attrs[id as usize] & (attr::CONTROL | attr::UNKNOWN) != 0)
            .map(|&id| &*vocab.texts[id as usize])
            .filter(|t| !t.is_empty())
            .collect();
        let ac = if texts.is_empty() {
            None
        } else {
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&texts)
                    .map_err(|e| TokenizerError::Matcher(e.to_string()))?,
            )
        };
        Ok(Self { ac })
    }
}

fn is_placeholder(c: char) -> bool {
    (FIRST..=LAST).contains(&(c as u32))
}

/// Placeholders for the control-token texts (and reserved characters) of untrusted strings,
/// for one prompt. Build it with [`crate::Tokenizer::guard`], pass every untrusted string
/// through [`SpecialGuard::protect`] before rendering, and tokenize the rendered prompt with
/// [`crate::Tokenizer::encode_guarded`].
#[derive(Debug)]
pub struct SpecialGuard<'t> {
    controls: &'t ControlTexts,
    /// Original text of placeholder `FIRST + i`.
    originals: Vec<String>,
    index: HashMap<String, char>,
}

impl<'t> SpecialGuard<'t> {
    pub(crate) fn new(controls: &'t ControlTexts) -> Self {
        Self { controls, originals: Vec::new(), index: HashMap::new() }
    }

    /// Whether no string needed a placeholder so far.
    pub fn is_empty(&self) -> bool {
        self.originals.is_empty()
    }

    fn placeholder(&mut self, original: &str) -> Option<char> {
        if let Some(&c) = self.index.get(original) {
            return Some(c);
        }
        let c = char::from_u32(FIRST + self.originals.len() as u32).filter(|&c| is_placeholder(c))?;
        self.originals.push(original.to_owned());
        self.index.insert(original.to_owned(), c);
        Some(c)
    }

    /// `s` with every control-token text (and every character of the placeholder range)
    /// replaced by a placeholder. Returns `s` unchanged when it holds neither. In the
    /// unreachable case of more than 65,534 distinct texts the rest are dropped from the
    /// string rather than left able to become control tokens.
    pub fn protect(&mut self, s: &str) -> String {
        let has_reserved = s.chars().any(is_placeholder);
        let matches: Vec<(usize, usize)> = match &self.controls.ac {
            Some(ac) => ac.find_iter(s).map(|m| (m.start(), m.end())).collect(),
            None => Vec::new(),
        };
        if matches.is_empty() && !has_reserved {
            return s.to_owned();
        }
        let mut out = String::with_capacity(s.len());
        let push_plain = |out: &mut String, text: &str, g: &mut Self| {
            if !has_reserved {
                out.push_str(text);
                return;
            }
            for c in text.chars() {
                if is_placeholder(c) {
                    let mut buf = [0u8; 4];
                    if let Some(p) = g.placeholder(c.encode_utf8(&mut buf)) {
                        out.push(p);
                    }
                } else {
                    out.push(c);
                }
            }
        };
        let mut pos = 0;
        for (a, b) in matches {
            push_plain(&mut out, &s[pos..a], self);
            if let Some(p) = self.placeholder(&s[a..b]) {
                out.push(p);
            }
            pos = b;
        }
        push_plain(&mut out, &s[pos..], self);
        out
    }

    /// `text` with every placeholder of this guard replaced by its original text.
    pub(crate) fn restore(&self, text: &str) -> Option<String> {
        if !text.chars().any(is_placeholder) {
            return None;
        }
        let mut out = String::with_capacity(text.len() + 16);
        for c in text.chars() {
            let i = (c as u32).wrapping_sub(FIRST) as usize;
            match self.originals.get(i) {
                Some(orig) if is_placeholder(c) => out.push_str(orig),
                _ => out.push(c),
            }
        }
        Some(out)
    }
}
