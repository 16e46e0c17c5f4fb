//! Token -> bytes (llama.cpp's `token_to_piece` and `detokenize`) and streaming decoding.

use crate::unicode::char_to_byte;
use crate::vocab::{attr, TokenizerKind, Vocab};
use crate::Tokenizer;

/// The bytes of every token, rendered with `special = true` (control tokens as their text).
#[derive(Debug)]
pub(crate) struct Pieces {
    data: Vec<u8>,
    offs: Vec<u32>,
}

impl Pieces {
    pub(crate) fn new(vocab: &Vocab) -> Pieces {
        let mut data = Vec::with_capacity(vocab.len() * 6);
        let mut offs = Vec::with_capacity(vocab.len() + 1);
        offs.push(0);
        for id in 0..vocab.len() {
            render(vocab, id, &mut data);
            offs.push(data.len() as u32);
        }
        Pieces { data, offs }
    }

    /// The piece of a token; empty for ids outside the vocabulary.
    #[inline]
    pub(crate) fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.offs.get(i), self.offs.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.data[a as usize..b as usize],
            _ => &[],
        }
    }
}

fn render(vocab: &Vocab, id: usize, out: &mut Vec<u8>) {
    let a = vocab.attrs[id];
    let text = &*vocab.texts[id];
    if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if a & attr::NORMAL != 0 {
        if vocab.kind == TokenizerKind::Spm || vocab.escape_whitespaces {
            unescape_whitespace(text, out);
        } else {
            byte_level_decode(text, out);
        }
    } else if a & attr::BYTE != 0 {
        // llama.cpp reads the two hex digits of `<0xXX>` with strtol.
        let v = text.get(3..5).and_then(|h| u8::from_str_radix(h, 16).ok()).unwrap_or(0);
        out.push(v);
    }
    // Unused and undefined tokens render as nothing.
}

fn unescape_whitespace(text: &str, out: &mut Vec<u8>) {
    for (i, part) in text.split('\u{2581}').enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(part.as_bytes());
    }
}

/// Undo the GPT-2 byte alphabet (llama.cpp's `llama_decode_text`, including its marker for
/// characters outside the alphabet).
fn byte_level_decode(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

/// llama.cpp's `detokenize`, on bytes.
pub(crate) fn detokenize(tok: &Tokenizer, ids: &[u32], remove_special: bool, unparse_special: bool) -> Vec<u8> {
    let v = &tok.vocab;
    let mut ids = ids;
    let mut remove_space = v.add_space_prefix;
    if remove_special && v.add_bos && ids.first().is_some_and(|&i| Some(i) == v.ids.bos) {
        remove_space = false;
        ids = &ids[1..];
    }
    if remove_special && v.add_eos && ids.last().is_some_and(|&i| Some(i) == v.ids.eos) {
        ids = &ids[..ids.len() - 1];
    }
    let mut out = Vec::with_capacity(ids.len() * 4);
    for &id in ids {
        let piece = tok.piece_with(id, unparse_special);
        let piece = if remove_space { piece.strip_prefix(b" ").unwrap_or(piece) } else { piece };
        remove_space = false;
        out.extend_from_slice(piece);
    }
    if v.clean_spaces {
        clean_up_spaces(&mut out);
    }
    out
}

/// llama.cpp's `clean_spaces` passes, replayed on the same in-place buffer arithmetic.
fn clean_up_spaces(t: &mut Vec<u8>) {
    // " ?", " !", " .", " ," lose the space.
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);

    // " ' " loses both spaces.
    let n = t.len();
    let mut total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = t[i];
        if x == b'\'' && i + 1 < n && t[i - 1] == b' ' && t[i + 1] == b' ' {
            total -= 1;
            i += 1;
            t[i] = 0;
        }
        t[total] = x;
        total += 1;
        i += 1;
    }
    t.truncate(total);

    // " 's", " 'm", " 're", " 've" lose the space.
    let n = t.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = t[i];
        if t[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = t[i + 1];
            if matches!(x1, b's' | b'm') || (i + 2 < n && matches!((x1, t[i + 2]), (b'r', b'e') | (b'v', b'e'))) {
                total -= 1;
            }
        }
        t[total] = x;
        total += 1;
    }
    t.truncate(total);
}

/// Incremental detokenizer: feed ids one at a time, get back only complete UTF-8 text.
///
/// Bytes of a character split across tokens are held back until the character is complete;
/// invalid byte sequences come out as U+FFFD. The text equals [`Tokenizer::decode`] of all ids
/// pushed so far, except that llama.cpp's `clean_spaces` post-processing (enabled for a few
/// older BPE pre-tokenizers, not for SmolLM2 / Qwen2.5 / Gemma 3) is not applied.
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    pending: Vec<u8>,
    first: bool,
    special: bool,
}

/// Alias of [`StreamDecoder`].
pub type Decoder<'t> = StreamDecoder<'t>;

impl<'t> StreamDecoder<'t> {
    /// A decoder that renders control tokens as their text (like [`Tokenizer::decode`]).
    pub fn new(tok: &'t Tokenizer) -> StreamDecoder<'t> {
        StreamDecoder { tok, pending: Vec::new(), first: true, special: true }
    }

    /// Render control / unknown tokens as their text (`true`, the default) or as nothing.
    pub fn with_special(mut self, special: bool) -> StreamDecoder<'t> {
        self.special = special;
        self
    }

    /// Add one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        let piece = self.tok.piece_with(id, self.special);
        let piece = if self.first && self.tok.vocab.add_space_prefix {
            piece.strip_prefix(b" ").unwrap_or(piece)
        } else {
            piece
        };
        self.first = false;
        self.pending.extend_from_slice(piece);
        self.take(false)
    }

    /// Add several tokens; returns the text they complete.
    pub fn push_all(&mut self, ids: &[u32]) -> String {
        ids.iter().map(|&id| self.push(id)).collect()
    }

    /// Emit whatever is held back (an incomplete character becomes U+FFFD) and reset.
    pub fn flush(&mut self) -> String {
        let s = self.take(true);
        self.first = true;
        s
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    fn take(&mut self, all: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // `good` is valid UTF-8 (`valid_up_to`), so this copies it unchanged.
                    out.push_str(&String::from_utf8_lossy(good));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None if all => {
                            out.push('\u{FFFD}');
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }
}
