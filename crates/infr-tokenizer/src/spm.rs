//! SentencePiece BPE (llama.cpp's `llm_tokenizer_spm_session`).
//!
//! The text (spaces already escaped to `▁`) starts as one symbol per UTF-8 character. Adjacent
//! symbols whose concatenation is a vocabulary entry are queued with that entry's score; the best
//! score merges first (leftmost on ties), and merging repeats until nothing is left to merge.
//! Symbols that are not tokens at the end fall back to byte tokens (`<0xXX>`).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::unicode::utf8_len;
use crate::vocab::Vocab;

const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
}

/// A queued merge: the best score first, then the leftmost.
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then_with(|| o.left.cmp(&self.left))
    }
}

/// Reusable buffers.
#[derive(Default)]
pub(crate) struct Scratch {
    syms: Vec<Sym>,
    heap: BinaryHeap<Bigram>,
}

/// Tokenize one fragment of escaped text, appending ids.
pub(crate) fn encode(vocab: &Vocab, text: &[u8], s: &mut Scratch, out: &mut Vec<u32>) {
    s.syms.clear();
    s.heap.clear();
    let mut off = 0usize;
    while off < text.len() {
        let len = utf8_len(text[off]).min(text.len() - off);
        let idx = s.syms.len() as u32;
        let next = if off + len == text.len() { NONE } else { idx + 1 };
        // `idx - 1` wraps to NONE for the first symbol.
        s.syms.push(Sym { start: off as u32, len: len as u32, prev: idx.wrapping_sub(1), next });
        off += len;
    }
    for i in 1..s.syms.len() as u32 {
        try_add(vocab, text, s, i - 1, i);
    }
    while let Some(b) = s.heap.pop() {
        let (l, r) = (s.syms[b.left as usize], s.syms[b.right as usize]);
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        s.syms[b.left as usize].len += r.len;
        s.syms[b.left as usize].next = r.next;
        s.syms[b.right as usize].len = 0;
        if r.next != NONE {
            s.syms[r.next as usize].prev = b.left;
        }
        if l.prev != NONE {
            try_add(vocab, text, s, l.prev, b.left);
        }
        if r.next != NONE {
            try_add(vocab, text, s, b.left, r.next);
        }
    }

    let mut k = if s.syms.is_empty() { NONE } else { 0 };
    while k != NONE {
        let sym = s.syms[k as usize];
        k = sym.next;
        let piece = &text[sym.start as usize..(sym.start + sym.len) as usize];
        match vocab.lookup(piece) {
            Some(id) => out.push(id),
            None => {
                // llama.cpp throws when a byte has no token; we fall back to UNK, or drop it.
                for &b in piece {
                    out.extend(vocab.byte_to_token(b).or(vocab.ids.unk));
                }
            }
        }
    }
}

#[inline]
fn try_add(vocab: &Vocab, text: &[u8], s: &mut Scratch, left: u32, right: u32) {
    let (l, r) = (s.syms[left as usize], s.syms[right as usize]);
    let size = l.len + r.len;
    let piece = &text[l.start as usize..(l.start + size) as usize];
    if let Some(id) = vocab.lookup(piece) {
        s.heap.push(Bigram { score: vocab.scores[id as usize], left, right, size });
    }
}
