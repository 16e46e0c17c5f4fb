//! The synthetic byte-level BPE vocabulary.

use infr_gguf::Value;

/// Token strings, token types and merges, as GGUF metadata values.
pub(super) struct Vocab {
    /// `tokenizer.ggml.tokens`.
    pub tokens: Vec<Value>,
    /// `tokenizer.ggml.token_type` (1 normal, 3 control).
    pub types: Vec<Value>,
    /// `tokenizer.ggml.merges`.
    pub merges: Vec<Value>,
}

/// Merges written at most: enough to exercise the BPE merge loop (every two-letter word and
/// the first three-letter ones) while keeping the list small; llama.cpp requires the key.
const MAX_MERGES: usize = 4096;

/// Filler token `i`: the lowercase words of two or more letters in shortlex order (`aa`,
/// `ab`, … `zz`, `aaa`, …), so each one's prefix without its last letter is a byte token or
/// an earlier filler, and pre-tokenizers keep such words in one piece.
fn filler(i: usize) -> String {
    let (mut len, mut k, mut count) = (2u32, i, 26usize * 26);
    while k >= count {
        k -= count;
        len += 1;
        count *= 26;
    }
    let mut word = vec![b'a'; len as usize];
    for c in word.iter_mut().rev() {
        *c = b'a' + (k % 26) as u8;
        k /= 26;
    }
    String::from_utf8(word).unwrap_or_default()
}

/// A GPT-2 style byte-level vocabulary of `n` tokens: the 256 byte characters of
/// `bytes_to_unicode` (in its order, as real vocabularies start), filler words merged from
/// their prefix and last letter, and the control tokens last.
pub(super) fn vocabulary(n: usize, controls: &[&str]) -> Vocab {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut chars: Vec<char> = printable.iter().filter_map(|&c| char::from_u32(c)).collect();
    let mut extra = 0;
    for b in 0..256u32 {
        if !printable.contains(&b) {
            chars.push(char::from_u32(256 + extra).unwrap_or('?'));
            printable.push(b);
            extra += 1;
        }
    }
    let mut tokens: Vec<Value> = chars.iter().map(|c| Value::String(c.to_string())).collect();
    let n_filler = n.saturating_sub(256 + controls.len());
    tokens.extend((0..n_filler).map(|i| Value::String(filler(i))));
    tokens.extend(controls.iter().map(|c| Value::String((*c).to_owned())));
    tokens.truncate(n);
    let first_control = n.saturating_sub(controls.len());
    let types = (0..tokens.len()).map(|i| Value::I32(if i >= first_control { 3 } else { 1 })).collect();
    let merges = (0..n_filler.min(MAX_MERGES))
        .map(|i| {
            let w = filler(i);
            Value::String(format!("{} {}", &w[..w.len() - 1], &w[w.len() - 1..]))
        })
        .collect();
    Vocab { tokens, types, merges }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fillers_are_shortlex_words() {
        assert_eq!([filler(0), filler(1), filler(25), filler(26)], ["aa", "ab", "az", "ba"]);
        assert_eq!([filler(675), filler(676), filler(676 + 17576)], ["zz", "aaa", "aaaa"]);
    }

    #[test]
    fn vocabulary_is_byte_level_and_unique() {
        let v = vocabulary(600, &["<|a|>", "<|b|>"]);
        let toks: Vec<&str> = v.tokens.iter().filter_map(Value::as_str).collect();
        assert_eq!(toks.len(), 600);
        assert_eq!(toks[0], "!");
        assert_eq!(toks.iter().collect::<std::collections::HashSet<_>>().len(), 600);
        assert!(toks[..256].iter().all(|t| t.chars().count() == 1));
        assert!(toks.contains(&"\u{10A}"), "newline byte is Ċ");
        assert_eq!(toks[599], "<|b|>");
        // Every merge joins two tokens into a third (three-letter words included).
        let v = vocabulary(6000, &["<|a|>"]);
        let set: std::collections::HashSet<&str> = v.tokens.iter().filter_map(Value::as_str).collect();
        assert_eq!(v.merges.len(), MAX_MERGES);
        for m in v.merges.iter().filter_map(Value::as_str) {
            let (a, b) = m.split_once(' ').unwrap();
            assert!(set.contains(a) && set.contains(b) && set.contains(format!("{a}{b}").as_str()), "{m}");
        }
    }
}
