//! Special-token partitioning (llama.cpp's `tokenizer_st_partition`).
//!
//! llama.cpp takes the special tokens longest first and, for each, cuts every still-unclaimed
//! stretch of text at its occurrences, left to right. A token therefore wins over shorter ones even
//! when a shorter one starts earlier. We find all occurrences at once with Aho-Corasick and then
//! replay that order: an occurrence is taken when it lies entirely in unclaimed text and does not
//! overlap the previous occurrence taken for the same token.
//!
//! With `parse_special = true` control, user-defined and unknown tokens are matched; with `false`
//! only user-defined ones (llama.cpp, following HF tokenizers, always splits those out).

use aho_corasick::{AhoCorasick, MatchKind};

use crate::vocab::{attr, Vocab};
use crate::TokenizerError;

/// A piece of the input: raw text still to be tokenized, or a special token already matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fragment<'a> {
    Text(&'a str),
    Token(u32),
}

/// Finds special tokens in text.
#[derive(Debug)]
pub(crate) struct Matcher {
    ac: Option<AhoCorasick>,
    /// Token id of each pattern; pattern index = priority (longest first).
    ids: Vec<u32>,
    lens: Vec<u32>,
    strip: Vec<u16>,
}

const FREE: u8 = 0;
const TAKEN: u8 = 1;
const DROPPED: u8 = 2;

/// `isspace` in the C locale.
fn c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

impl Matcher {
    /// Matcher for `parse_special` on or off.
    pub(crate) fn new(vocab: &Vocab, parse_special: bool) -> Result<Matcher, TokenizerError> {
        let skip = if parse_special { 0 } else { attr::CONTROL | attr::UNKNOWN };
        let ids: Vec<u32> =
            vocab.special_cache.iter().copied().filter(|&id| vocab.attrs[id as usize] & skip == 0).collect();
        let lens = ids.iter().map(|&id| vocab.texts[id as usize].len() as u32).collect();
        let strip = ids.iter().map(|&id| vocab.attrs[id as usize] & (attr::LSTRIP | attr::RSTRIP)).collect();
        let ac = if ids.is_empty() {
            None
        } else {
            let patterns = ids.iter().map(|&id| vocab.texts[id as usize].as_bytes());
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::Standard)
                    .build(patterns)
                    .map_err(|e| TokenizerError::Matcher(e.to_string()))?,
            )
        };
        Ok(Matcher { ac, ids, lens, strip })
    }

    /// Split `text` into raw-text and special-token fragments.
    pub(crate) fn partition<'a>(&self, text: &'a str, out: &mut Vec<Fragment<'a>>) {
        out.clear();
        if text.is_empty() {
            return;
        }
        let Some(ac) = &self.ac else {
            out.push(Fragment::Text(text));
            return;
        };
        let mut hits: Vec<(u32, u32)> =
            ac.find_overlapping_iter(text).map(|m| (m.pattern().as_u32(), m.start() as u32)).collect();
        if hits.is_empty() {
            out.push(Fragment::Text(text));
            return;
        }
        hits.sort_unstable();

        let bytes = text.as_bytes();
        let mut state = vec![FREE; bytes.len()];
        let mut taken: Vec<(u32, u32)> = Vec::new(); // (start, pattern)
        let mut i = 0;
        while i < hits.len() {
            let pat = hits[i].0;
            let len = self.lens[pat as usize] as usize;
            let strip = self.strip[pat as usize];
            let mut last_end = 0usize;
            while i < hits.len() && hits[i].0 == pat {
                let start = hits[i].1 as usize;
                i += 1;
                let end = start + len;
                if start < last_end || state[start..end].iter().any(|&s| s != FREE) {
                    continue;
                }
                state[start..end].fill(TAKEN);
                taken.push((start as u32, pat));
                last_end = end;
                if strip & attr::LSTRIP != 0 {
                    let mut k = start;
                    while k > 0 && state[k - 1] == FREE && c_space(bytes[k - 1]) {
                        state[k - 1] = DROPPED;
                        k -= 1;
                    }
                }
                if strip & attr::RSTRIP != 0 {
                    let mut k = end;
                    while k < bytes.len() && state[k] == FREE && c_space(bytes[k]) {
                        state[k] = DROPPED;
                        k += 1;
                    }
                }
            }
        }
        taken.sort_unstable();

        let mut pos = 0usize;
        let push_text = |a: usize, b: usize, out: &mut Vec<Fragment<'a>>| {
            // Free stretches between tokens; dropped whitespace is skipped.
            let mut s = a;
            while s < b {
                while s < b && state[s] != FREE {
                    s += 1;
                }
                let mut e = s;
                while e < b && state[e] == FREE {
                    e += 1;
                }
                if e > s {
                    if let Some(t) = text.get(s..e) {
                        out.push(Fragment::Text(t));
                    }
                }
                s = e;
            }
        };
        for &(start, pat) in &taken {
            push_text(pos, start as usize, out);
            out.push(Fragment::Token(self.ids[pat as usize]));
            pos = start as usize + self.lens[pat as usize] as usize;
        }
        push_text(pos, bytes.len(), out);
    }
}
