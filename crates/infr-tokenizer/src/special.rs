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
    /// Pattern texts, concatenated.
    texts: Vec<u8>,
    offs: Vec<u32>,
    /// Occurrence count up to which positions are collected up front (see [`RARE`]).
    pub(crate) rare: u32,
}

/// Tokens occurring at most this often have their positions collected up front; more frequent
/// ones are searched for while claiming.
const RARE: u32 = 64;

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
        let mut texts = Vec::new();
        let mut offs = vec![0u32];
        for &id in &ids {
            texts.extend_from_slice(vocab.texts[id as usize].as_bytes());
            offs.push(texts.len() as u32);
        }
        Ok(Matcher { ac, ids, lens, strip, texts, offs, rare: RARE })
    }

    fn text_of(&self, pattern: usize) -> &[u8] {
        &self.texts[self.offs[pattern] as usize..self.offs[pattern + 1] as usize]
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
        let bytes = text.as_bytes();

        // Pass 1: how often each token occurs (overlaps included).
        let mut counts = vec![0u32; self.ids.len()];
        let mut any = false;
        for m in ac.find_overlapping_iter(text) {
            counts[m.pattern().as_usize()] += 1;
            any = true;
        }
        if !any {
            out.push(Fragment::Text(text));
            return;
        }
        // Pass 2: positions of the rarely occurring tokens. Frequent ones (long runs of spaces or
        // newlines can make a handful of tokens match at almost every byte) are searched for
        // directly while claiming, so memory stays proportional to what is actually kept.
        let mut slot = vec![u32::MAX; self.ids.len()];
        let mut starts: Vec<Vec<u32>> = Vec::new();
        for (p, &c) in counts.iter().enumerate() {
            if c > 0 && c <= self.rare {
                slot[p] = starts.len() as u32;
                starts.push(Vec::with_capacity(c as usize));
            }
        }
        if !starts.is_empty() {
            for m in ac.find_overlapping_iter(text) {
                let k = slot[m.pattern().as_usize()];
                if k != u32::MAX {
                    starts[k as usize].push(m.start() as u32);
                }
            }
        }

        let mut state = vec![FREE; bytes.len()];
        let mut taken: Vec<(u32, u32)> = Vec::new(); // (start, pattern)
        for (p, &c) in counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let len = self.lens[p] as usize;
            let mut claim = |start: usize, state: &mut [u8]| {
                let end = start + len;
                state[start..end].fill(TAKEN);
                taken.push((start as u32, p as u32));
                if self.strip[p] & attr::LSTRIP != 0 {
                    let mut k = start;
                    while k > 0 && state[k - 1] == FREE && c_space(bytes[k - 1]) {
                        state[k - 1] = DROPPED;
                        k -= 1;
                    }
                }
                if self.strip[p] & attr::RSTRIP != 0 {
                    let mut k = end;
                    while k < bytes.len() && state[k] == FREE && c_space(bytes[k]) {
                        state[k] = DROPPED;
                        k += 1;
                    }
                }
                end
            };
            if slot[p] != u32::MAX {
                let list = &mut starts[slot[p] as usize];
                list.sort_unstable();
                let mut last_end = 0usize;
                for &start in list.iter() {
                    let start = start as usize;
                    if start >= last_end && state[start..start + len].iter().all(|&s| s == FREE) {
                        last_end = claim(start, &mut state);
                    }
                }
            } else {
                let needle = self.text_of(p);
                let finder = memchr::memmem::Finder::new(needle);
                let mut pos = 0usize;
                while let Some(off) = finder.find(&bytes[pos..]) {
                    let start = pos + off;
                    match state[start..start + len].iter().rposition(|&s| s != FREE) {
                        // Blocked: no occurrence can start at or before the last claimed byte.
                        Some(k) => pos = start + k + 1,
                        None => pos = claim(start, &mut state),
                    }
                }
            }
        }
        taken.sort_unstable();

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
        let mut pos = 0usize;
        for &(start, pat) in &taken {
            push_text(pos, start as usize, out);
            out.push(Fragment::Token(self.ids[pat as usize]));
            pos = start as usize + self.lens[pat as usize] as usize;
        }
        push_text(pos, bytes.len(), out);
    }
}
