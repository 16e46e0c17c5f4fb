//! Byte-level BPE (llama.cpp's `llm_tokenizer_bpe_session`).
//!
//! Every string that takes part in a merge gets a "piece id": vocabulary tokens keep their token id,
//! merge parts or results that are not tokens get ids past the vocabulary. Merging then works on
//! integers: `(left piece, right piece) -> (rank, merged piece)`. Within a word the lowest rank
//! merges first, the leftmost pair on ties, exactly like llama.cpp's priority queue.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use infr_gguf::Metadata;
use rustc_hash::FxHashMap;

use crate::unicode::{byte_to_char, utf8_len};
use crate::vocab::Vocab;
use crate::TokenizerError;

/// No piece: a code point that neither the vocabulary nor any merge mentions.
const NONE: u32 = u32::MAX;

/// Merge tables of a BPE vocabulary.
#[derive(Debug)]
pub(crate) struct Bpe {
    n_vocab: u32,
    /// Texts of the extra pieces (id `n_vocab + i`).
    extra_text: Vec<Box<[u8]>>,
    extra_id: FxHashMap<Box<[u8]>, u32>,
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// Piece of each byte's byte-level character (byte-encoded vocabularies).
    byte_piece: [u32; 256],
    byte_encode: bool,
    ignore_merges: bool,
    newline_words: bool,
}

/// Reusable buffers for merging one word.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Byte-level spelling of the current word.
    encoded: Vec<u8>,
    /// `(piece, byte start, byte len, prev, next)` per symbol; `len == 0` once merged away.
    syms: Vec<Sym>,
    heap: BinaryHeap<Reverse<Candidate>>,
}

/// A queued merge: `(rank, left, right, left piece, right piece, merged piece)`; the lowest rank
/// pops first, then the leftmost.
type Candidate = (u32, u32, u32, u32, u32, u32);

#[derive(Clone, Copy)]
struct Sym {
    piece: u32,
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
}

impl Bpe {
    /// Read `tokenizer.ggml.merges` and index it.
    pub(crate) fn new(meta: &Metadata, vocab: &Vocab) -> Result<Bpe, TokenizerError> {
        const KEY: &str = "tokenizer.ggml.merges";
        let lines = meta.str_array(KEY)?.ok_or(TokenizerError::MissingKey(KEY))?;
        let n_vocab = vocab.len() as u32;
        let mut bpe = Bpe {
            n_vocab,
            extra_text: Vec::new(),
            extra_id: FxHashMap::default(),
            merges: FxHashMap::with_capacity_and_hasher(lines.len(), Default::default()),
            byte_piece: [NONE; 256],
            byte_encode: vocab.pre.byte_encode,
            ignore_merges: vocab.pre.ignore_merges,
            newline_words: vocab.pre.newline_words,
        };
        let mut concat = Vec::new();
        for (rank, line) in lines.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte; a line without one maps
            // to an empty pair, which no symbol can ever form.
            let bytes = line.as_bytes();
            let Some(sp) = bytes.iter().skip(1).position(|&b| b == b' ').map(|p| p + 1) else { continue };
            let (a, b) = (&bytes[..sp], &bytes[sp + 1..]);
            if b.is_empty() {
                continue;
            }
            let left = bpe.intern(vocab, a);
            let right = bpe.intern(vocab, b);
            concat.clear();
            concat.extend_from_slice(a);
            concat.extend_from_slice(b);
            let merged = bpe.intern(vocab, &concat);
            // The first occurrence of a pair keeps its rank (llama.cpp's `emplace`).
            bpe.merges.entry((left, right)).or_insert((rank as u32, merged));
        }
        if bpe.byte_encode {
            for b in 0..=255u8 {
                let mut buf = [0u8; 4];
                let s = byte_to_char(b).encode_utf8(&mut buf);
                bpe.byte_piece[b as usize] = bpe.find(vocab, s.as_bytes());
            }
        }
        Ok(bpe)
    }

    fn intern(&mut self, vocab: &Vocab, text: &[u8]) -> u32 {
        let found = self.find(vocab, text);
        if found != NONE {
            return found;
        }
        let id = self.n_vocab + self.extra_text.len() as u32;
        self.extra_text.push(text.into());
        self.extra_id.insert(text.into(), id);
        id
    }

    fn find(&self, vocab: &Vocab, text: &[u8]) -> u32 {
        vocab.lookup(text).or_else(|| self.extra_id.get(text).copied()).unwrap_or(NONE)
    }

    /// Tokenize one pre-tokenized word (raw UTF-8), appending ids.
    pub(crate) fn encode_word(&self, vocab: &Vocab, word: &[u8], s: &mut Scratch, out: &mut Vec<u32>) {
        // The word as the vocabulary spells it.
        s.encoded.clear();
        if self.byte_encode {
            for &b in word {
                let mut buf = [0u8; 4];
                s.encoded.extend_from_slice(byte_to_char(b).encode_utf8(&mut buf).as_bytes());
            }
        } else {
            s.encoded.extend_from_slice(word);
        }
        let text = &s.encoded;

        s.syms.clear();
        let whole = (self.ignore_merges
            || (self.newline_words && !word.is_empty() && word.iter().all(|&b| b == b'\n')))
        .then(|| vocab.lookup(text))
        .flatten();
        if let Some(id) = whole {
            out.push(id);
            return;
        }

        // One symbol per character of the spelled word.
        let mut off = 0usize;
        let mut i = 0usize;
        while off < text.len() {
            let len = utf8_len(text[off]).min(text.len() - off);
            let piece = if self.byte_encode {
                self.byte_piece[word[i] as usize]
            } else {
                self.find(vocab, &text[off..off + len])
            };
            let next = if off + len == text.len() { NONE } else { s.syms.len() as u32 + 1 };
            let prev = if s.syms.is_empty() { NONE } else { s.syms.len() as u32 - 1 };
            s.syms.push(Sym { piece, start: off as u32, len: len as u32, prev, next });
            off += len;
            i += 1;
        }

        s.heap.clear();
        for k in 1..s.syms.len() {
            self.push_pair(s, k as u32 - 1, k as u32);
        }
        while let Some(Reverse((_, left, right, lp, rp, merged))) = s.heap.pop() {
            let (l, r) = (s.syms[left as usize], s.syms[right as usize]);
            // Stale entry: a side was merged away or has grown since the pair was queued.
            if l.len == 0 || r.len == 0 || l.piece != lp || r.piece != rp {
                continue;
            }
            let ls = &mut s.syms[left as usize];
            ls.len += r.len;
            ls.piece = merged;
            ls.next = r.next;
            s.syms[right as usize].len = 0;
            if r.next != NONE {
                s.syms[r.next as usize].prev = left;
            }
            if l.prev != NONE {
                self.push_pair(s, l.prev, left);
            }
            if r.next != NONE {
                self.push_pair(s, left, r.next);
            }
        }

        let mut k = if s.syms.is_empty() { NONE } else { 0 };
        while k != NONE {
            let sym = s.syms[k as usize];
            k = sym.next;
            if sym.piece < self.n_vocab {
                out.push(sym.piece);
                continue;
            }
            // Not a token: fall back to single bytes of its spelling, as llama.cpp does.
            let bytes = &s.encoded[sym.start as usize..(sym.start + sym.len) as usize];
            for &b in bytes {
                let id = if self.byte_encode { vocab.lookup(&[b]) } else { vocab.byte_to_token_hex(b) };
                out.extend(id);
            }
        }
    }

    #[inline]
    fn push_pair(&self, s: &mut Scratch, left: u32, right: u32) {
        let (a, b) = (s.syms[left as usize].piece, s.syms[right as usize].piece);
        if a == NONE || b == NONE {
            return;
        }
        if let Some(&(rank, merged)) = self.merges.get(&(a, b)) {
            s.heap.push(Reverse((rank, left, right, a, b, merged)));
        }
    }

    /// Number of merge rules.
    pub(crate) fn n_merges(&self) -> usize {
        self.merges.len()
    }
}
