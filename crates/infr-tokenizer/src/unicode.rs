//! Code point classification and the GPT-2 byte <-> character mapping, as llama.cpp sees them.
//!
//! llama.cpp's pre-tokenizers only ask a handful of questions about a code point: is it a letter,
//! a number, a mark, punctuation, a symbol, whitespace? The answers come from Unicode 15.1's general
//! categories (see `unicode_table.rs`) plus a fixed whitespace set.

use std::sync::OnceLock;

use crate::unicode_table::CLASS_RUNS;

/// General-category class: unassigned (`Cn`).
pub(crate) const UNDEFINED: u8 = 0;
/// `N*`.
pub(crate) const NUMBER: u8 = 1;
/// `L*`.
pub(crate) const LETTER: u8 = 2;
/// `Z*` (spaces are also flagged whitespace).
#[allow(dead_code)]
pub(crate) const SEPARATOR: u8 = 3;
/// `M*`.
pub(crate) const MARK: u8 = 4;
/// `P*`.
pub(crate) const PUNCTUATION: u8 = 5;
/// `S*`.
pub(crate) const SYMBOL: u8 = 6;
/// `C*` other than `Cn`.
#[allow(dead_code)]
pub(crate) const CONTROL: u8 = 7;

/// Bit set in [`info`] for the code points llama.cpp treats as whitespace.
pub(crate) const WS_BIT: u8 = 0x08;
/// Mask of the class in [`info`].
pub(crate) const CLASS_MASK: u8 = 0x07;

/// llama.cpp's whitespace set (`unicode_set_whitespace`): the Unicode `White_Space` property.
const WHITESPACE: [u32; 25] = [
    0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
    0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
];

fn class_slow(cp: u32) -> u8 {
    // Last run starting at or before `cp`.
    let i = CLASS_RUNS.partition_point(|&(start, _)| start <= cp);
    if i == 0 {
        UNDEFINED
    } else {
        CLASS_RUNS[i - 1].1
    }
}

fn bmp_table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![0u8; 0x10000];
        for (i, w) in CLASS_RUNS.iter().enumerate() {
            let end = CLASS_RUNS.get(i + 1).map_or(0x110000, |n| n.0).min(0x10000);
            let start = w.0.min(0x10000);
            for v in &mut t[start as usize..end as usize] {
                *v = w.1;
            }
        }
        for &w in &WHITESPACE {
            t[w as usize] |= WS_BIT;
        }
        t
    })
}

/// Class and whitespace bit of one code point (`class | WS_BIT`).
#[inline]
pub(crate) fn info(cp: u32) -> u8 {
    if cp < 0x10000 {
        bmp_table()[cp as usize]
    } else if cp < 0x110000 {
        class_slow(cp)
    } else {
        UNDEFINED
    }
}

/// The general-category class of a code point.
#[inline]
#[allow(dead_code)]
pub(crate) fn class(cp: u32) -> u8 {
    info(cp) & CLASS_MASK
}

/// Whether llama.cpp treats the code point as whitespace.
#[cfg(test)]
pub(crate) fn is_whitespace(cp: u32) -> bool {
    info(cp) & WS_BIT != 0
}

/// The GPT-2 byte-level alphabet: the character each byte is spelled with in a `gpt2` vocabulary.
pub(crate) fn byte_to_char(b: u8) -> char {
    static MAP: OnceLock<[char; 256]> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = ['\0'; 256];
        let mut next = 256u32;
        for b in 0..=255u8 {
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let cp = if printable {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            map[b as usize] = char::from_u32(cp).unwrap_or('\u{FFFD}');
        }
        map
    })[b as usize]
}

/// The byte a GPT-2 byte-level character stands for, if it is one.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    static MAP: OnceLock<Vec<i16>> = OnceLock::new();
    let map = MAP.get_or_init(|| {
        let mut m = vec![-1i16; 0x144];
        for b in 0..=255u8 {
            m[byte_to_char(b) as usize] = b as i16;
        }
        m
    });
    map.get(c as usize).and_then(|&v| u8::try_from(v).ok())
}

/// Length of the UTF-8 sequence a lead byte announces, as llama.cpp's `unicode_len_utf8` computes
/// it (continuation bytes count as 1).
#[inline]
pub(crate) fn utf8_len(lead: u8) -> usize {
    const LOOKUP: [u8; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(lead >> 4) as usize] as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_of_common_code_points() {
        assert_eq!(class('a' as u32), LETTER);
        assert_eq!(class('Z' as u32), LETTER);
        assert_eq!(class('7' as u32), NUMBER);
        assert_eq!(class('!' as u32), PUNCTUATION);
        assert_eq!(class('$' as u32), SYMBOL);
        assert_eq!(class(' ' as u32), SEPARATOR);
        assert_eq!(class('\n' as u32), CONTROL);
        assert_eq!(class('é' as u32), LETTER);
        assert_eq!(class('日' as u32), LETTER);
        assert_eq!(class('²' as u32), NUMBER);
        assert_eq!(class(0x0301), MARK);
        assert_eq!(class('😀' as u32), SYMBOL);
        assert_eq!(class(0x10FFFF), UNDEFINED);
        assert_eq!(class(0x2FFC), SYMBOL, "Unicode 15.1 addition");
        assert_eq!(class(0x1C89), UNDEFINED, "Unicode 16 addition, unknown to llama.cpp's table");
        assert!(is_whitespace(0x3000) && is_whitespace('\t' as u32) && !is_whitespace(0x1C));
        assert!(!is_whitespace(0x200B));
    }

    #[test]
    fn byte_alphabet_round_trips() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
    }
}
