//! Word splitters: llama.cpp's hand-written splitters for the common pre-tokenizer regexes, and a
//! general engine for the others that mirrors llama.cpp's `std::regex` fallback.
//!
//! Text is handled as code points. A split runs stage by stage: each stage cuts every piece the
//! previous stage produced, never looking across a piece boundary (llama.cpp's `offsets`).

use fancy_regex::Regex;

use crate::unicode::{self, CLASS_MASK, LETTER, MARK, NUMBER, PUNCTUATION, SYMBOL, WS_BIT};

/// A code point range `[start, end)` of the text being split.
pub(crate) type Piece = (u32, u32);

/// The text of one fragment, decoded for splitting.
pub(crate) struct Text {
    /// The code points.
    pub cpts: Vec<u32>,
    /// Byte offset of each code point, plus the end.
    pub offs: Vec<u32>,
    /// `unicode::info` of each code point.
    pub info: Vec<u8>,
}

impl Text {
    /// Decode a fragment.
    pub(crate) fn new(src: &str) -> Text {
        let n = src.len();
        let mut cpts = Vec::with_capacity(n);
        let mut offs = Vec::with_capacity(n + 1);
        let mut info = Vec::with_capacity(n);
        for (i, c) in src.char_indices() {
            cpts.push(c as u32);
            offs.push(i as u32);
            info.push(unicode::info(c as u32));
        }
        offs.push(n as u32);
        Text { cpts, offs, info }
    }

    /// Byte range of a piece.
    pub(crate) fn bytes(&self, p: Piece) -> (usize, usize) {
        (self.offs[p.0 as usize] as usize, self.offs[p.1 as usize] as usize)
    }
}

/// Code point flags within one piece; positions outside it read as "nothing" (all false), like
/// llama.cpp's `OUT_OF_RANGE`.
struct View<'t> {
    cpts: &'t [u32],
    info: &'t [u8],
    end: usize,
}

impl View<'_> {
    #[inline]
    fn cpt(&self, p: usize) -> Option<u32> {
        if p < self.end {
            Some(self.cpts[p])
        } else {
            None
        }
    }
    #[inline]
    fn info(&self, p: usize) -> Option<u8> {
        if p < self.end {
            Some(self.info[p])
        } else {
            None
        }
    }
    #[inline]
    fn is(&self, p: usize, f: impl Fn(u8) -> bool) -> bool {
        self.info(p).is_some_and(f)
    }
}

#[inline]
fn letter(i: u8) -> bool {
    i & CLASS_MASK == LETTER
}
#[inline]
fn number(i: u8) -> bool {
    i & CLASS_MASK == NUMBER
}
#[inline]
fn mark(i: u8) -> bool {
    i & CLASS_MASK == MARK
}
#[inline]
fn space(i: u8) -> bool {
    i & WS_BIT != 0
}

/// Emits pieces from a cursor, dropping empty ones.
struct Emitter<'o> {
    out: &'o mut Vec<Piece>,
    prev: usize,
}

impl Emitter<'_> {
    #[inline]
    fn cut(&mut self, end: usize) {
        if end > self.prev {
            self.out.push((self.prev as u32, end as u32));
        }
        self.prev = end;
    }
}

/// Number of whitespace code points from `pos`, and the end of the last CR/LF among them.
fn whitespace_run(v: &View<'_>, pos: usize) -> (usize, Option<usize>) {
    let mut n = 0;
    let mut last_crlf = None;
    while v.is(pos + n, space) {
        if matches!(v.cpts[pos + n], 0x0D | 0x0A) {
            last_crlf = Some(pos + n + 1);
        }
        n += 1;
    }
    (n, last_crlf)
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
pub(crate) fn split_gpt2(t: &Text, pieces: &[Piece], out: &mut Vec<Piece>) {
    for &(a, b) in pieces {
        let v = View { cpts: &t.cpts, info: &t.info, end: b as usize };
        let mut e = Emitter { out, prev: a as usize };
        let mut pos = a as usize;
        let end = b as usize;
        while pos < end {
            let c = t.cpts[pos];
            if c == '\'' as u32 && pos + 1 < end {
                let n1 = t.cpts[pos + 1];
                if matches!(char::from_u32(n1), Some('s' | 't' | 'm' | 'd')) {
                    pos += 2;
                    e.cut(pos);
                    continue;
                }
                if pos + 2 < end {
                    let pair = (char::from_u32(n1), char::from_u32(t.cpts[pos + 2]));
                    if matches!(pair, (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))) {
                        pos += 3;
                        e.cut(pos);
                        continue;
                    }
                }
            }
            let sp = usize::from(c == ' ' as u32);
            let f2 = v.info(pos + sp);
            if f2.is_some_and(letter) || f2.is_some_and(number) {
                let class = f2.map_or(0, |i| i & CLASS_MASK);
                pos += sp;
                while v.is(pos, |i| i & CLASS_MASK == class) {
                    pos += 1;
                }
                e.cut(pos);
                continue;
            }
            let other = |i: u8| !(space(i) || letter(i) || number(i));
            if f2.is_some_and(other) {
                pos += sp;
                while v.is(pos, other) {
                    pos += 1;
                }
                e.cut(pos);
                continue;
            }
            let (n, _) = whitespace_run(&v, pos);
            if n > 1 && pos + n < end {
                pos += n - 1;
                e.cut(pos);
                continue;
            }
            pos += n.max(1);
            e.cut(pos);
        }
    }
}

/// The llama3 / qwen2 / qwen35 family:
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
/// with `D = max_digits`; `marks` makes letter runs also take combining marks (qwen35).
pub(crate) fn split_words(t: &Text, pieces: &[Piece], max_digits: usize, marks: bool, out: &mut Vec<Piece>) {
    let word = |i: u8| letter(i) || (marks && mark(i));
    for &(a, b) in pieces {
        let v = View { cpts: &t.cpts, info: &t.info, end: b as usize };
        let mut e = Emitter { out, prev: a as usize };
        let mut pos = a as usize;
        let end = b as usize;
        while pos < end {
            let c = t.cpts[pos];
            let f = t.info[pos];
            if c == '\'' as u32 && pos + 1 < end {
                let n1 = ascii_lower(t.cpts[pos + 1]);
                if matches!(n1, b's' | b't' | b'm' | b'd') {
                    pos += 2;
                    e.cut(pos);
                    continue;
                }
                if pos + 2 < end {
                    let n2 = ascii_lower(t.cpts[pos + 2]);
                    if matches!((n1, n2), (b'r', b'e') | (b'v', b'e') | (b'l', b'l')) {
                        pos += 3;
                        e.cut(pos);
                        continue;
                    }
                }
            }
            let crlf = c == 0x0D || c == 0x0A;
            if !(crlf || number(f)) && (word(f) || v.is(pos + 1, word)) {
                pos += 1;
                while v.is(pos, word) {
                    pos += 1;
                }
                e.cut(pos);
                continue;
            }
            if number(f) {
                let mut start = pos;
                while v.is(pos, number) {
                    pos += 1;
                    if pos - start >= max_digits {
                        e.cut(pos);
                        start = pos;
                    }
                }
                e.cut(pos);
                continue;
            }
            let other = |i: u8| !(space(i) || word(i) || number(i));
            let sp = usize::from(c == ' ' as u32);
            // An out-of-piece neighbour counts as "other" here (llama.cpp checks the current code
            // point's flags); it only happens for a lone trailing space, which every other branch
            // would cut the same way.
            if v.info(pos + sp).is_none_or(other) {
                pos += sp;
                while v.is(pos, other) {
                    pos += 1;
                }
                while matches!(v.cpt(pos), Some(0x0D | 0x0A)) {
                    pos += 1;
                }
                e.cut(pos);
                continue;
            }
            let (n, last_crlf) = whitespace_run(&v, pos);
            if let Some(p) = last_crlf {
                pos = p;
            } else if n > 1 && pos + n < end {
                pos += n - 1;
            } else {
                pos += n.max(1);
            }
            e.cut(pos);
        }
    }
}

#[inline]
fn ascii_lower(c: u32) -> u8 {
    match u8::try_from(c) {
        Ok(b) => b.to_ascii_lowercase(),
        Err(_) => 0,
    }
}

/// `\p{N}`: every number on its own, the runs between them as pieces.
pub(crate) fn split_digits(t: &Text, pieces: &[Piece], out: &mut Vec<Piece>) {
    for &(a, b) in pieces {
        let mut e = Emitter { out, prev: a as usize };
        for pos in a as usize..b as usize {
            if number(t.info[pos]) {
                e.cut(pos);
                e.cut(pos + 1);
            }
        }
        e.cut(b as usize);
    }
}

/// `[^\n]+|[\n]+`: runs of newlines and runs of everything else.
pub(crate) fn split_newlines(t: &Text, pieces: &[Piece], out: &mut Vec<Piece>) {
    for &(a, b) in pieces {
        let mut e = Emitter { out, prev: a as usize };
        for pos in a as usize + 1..b as usize {
            if (t.cpts[pos] == 0x0A) != (t.cpts[pos - 1] == 0x0A) {
                e.cut(pos);
            }
        }
        e.cut(b as usize);
    }
}

/// llama.cpp's AFMoE / tiny_aya digit grouping: a run of numbers is cut into a leading group of
/// `len % 3` (if non-zero) and then groups of three; everything else stays in between.
pub(crate) fn split_digit_groups(t: &Text, pieces: &[Piece], out: &mut Vec<Piece>) {
    for &(a, b) in pieces {
        let mut e = Emitter { out, prev: a as usize };
        let mut pos = a as usize;
        let end = b as usize;
        while pos < end {
            if !number(t.info[pos]) {
                pos += 1;
                continue;
            }
            let start = pos;
            while pos < end && number(t.info[pos]) {
                pos += 1;
            }
            let mut cur = start;
            let rem = (pos - start) % 3;
            if rem > 0 {
                e.cut(cur + rem);
                cur += rem;
            }
            while cur < pos {
                e.cut(cur + 3);
                cur += 3;
            }
        }
        e.cut(end);
    }
}

/// A pre-tokenizer regex without a hand-written splitter, run the way llama.cpp runs it through
/// `std::regex`: when it uses Unicode categories, on a "collapsed" text where every non-ASCII code
/// point stands for its category; otherwise on the code points with non-ASCII whitespace replaced
/// by `\v`. Unmatched stretches between matches become pieces too.
#[derive(Debug)]
pub(crate) struct GenericRegex {
    re: Regex,
    collapsed: bool,
}

/// Unicode categories llama.cpp collapses, and the class each becomes.
const CATEGORIES: [(&str, char, &str); 10] = [
    ("\\p{N}", '\u{D1}', "0-9"),
    ("\\p{L}", '\u{D2}', "A-Za-z"),
    ("\\p{P}", '\u{D3}', "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"),
    ("\\p{M}", '\u{D4}', ""),
    ("\\p{S}", '\u{D5}', "\\$\\+<->\\^`\\|\\~"),
    ("\\p{Lu}", '\u{D2}', "A-Za-z"),
    ("\\p{Ll}", '\u{D2}', "A-Za-z"),
    ("\\p{Lt}", '\u{D2}', "A-Za-z"),
    ("\\p{Lm}", '\u{D2}', "A-Za-z"),
    ("\\p{Lo}", '\u{D2}', "A-Za-z"),
];

impl GenericRegex {
    /// Translate and compile one of llama.cpp's regexes.
    pub(crate) fn compile(src: &str) -> Result<GenericRegex, String> {
        let collapsed = CATEGORIES.iter().any(|(p, _, _)| src.contains(p));
        let pattern = if collapsed { collapse_regex(src)? } else { ecma_to_rust(src) };
        let re =
            fancy_regex::RegexBuilder::new(&pattern).backtrack_limit(10_000_000).build().map_err(|e| e.to_string())?;
        Ok(GenericRegex { re, collapsed })
    }

    /// Split every piece by this regex.
    pub(crate) fn split(&self, t: &Text, pieces: &[Piece], out: &mut Vec<Piece>) {
        // One char per code point.
        let hay: String = t
            .cpts
            .iter()
            .zip(&t.info)
            .map(|(&c, &i)| {
                if c < 0x80 {
                    char::from_u32(c).unwrap_or('\0')
                } else if space(i) {
                    '\u{0B}'
                } else if !self.collapsed {
                    char::from_u32(c).unwrap_or('\u{FFFD}')
                } else {
                    match i & CLASS_MASK {
                        NUMBER => '\u{D1}',
                        LETTER => '\u{D2}',
                        PUNCTUATION => '\u{D3}',
                        MARK => '\u{D4}',
                        SYMBOL => '\u{D5}',
                        _ => '\u{D0}',
                    }
                }
            })
            .collect();
        // Code point index <-> byte offset in `hay`.
        let mut cp_to_byte: Vec<usize> = hay.char_indices().map(|(b, _)| b).collect();
        cp_to_byte.push(hay.len());
        let mut byte_to_cp = vec![0u32; hay.len() + 1];
        for (k, &b) in cp_to_byte.iter().enumerate() {
            byte_to_cp[b] = k as u32;
        }

        for &(a, b) in pieces {
            let base = cp_to_byte[a as usize];
            let slice = &hay[base..cp_to_byte[b as usize]];
            let mut e = Emitter { out, prev: a as usize };
            for m in self.re.find_iter(slice) {
                // A search the engine gives up on (backtrack limit) ends the splitting of this
                // piece; the rest stays one piece.
                let Ok(m) = m else { break };
                e.cut(byte_to_cp[base + m.start()] as usize);
                e.cut(byte_to_cp[base + m.end()] as usize);
            }
            e.cut(b as usize);
        }
    }
}

/// llama.cpp's regex collapsing: `\p{X}` becomes the category's stand-in code point plus its ASCII
/// members, as a class of its own or merged into the enclosing class.
fn collapse_regex(src: &str) -> Result<String, String> {
    if !src.is_ascii() {
        return Err("regex mixes Unicode categories and non-ASCII characters".into());
    }
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len() * 2);
    let mut inside = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'[' && (i == 0 || b[i - 1] != b'\\') {
            out.push('[');
            inside = true;
            i += 1;
            continue;
        }
        if inside && c == b']' && i > 0 && b[i - 1] != b'\\' {
            out.push(']');
            inside = false;
            i += 1;
            continue;
        }
        if c == b'\\' && i + 3 < b.len() && b[i + 1] == b'p' && b[i + 2] == b'{' {
            if let Some(close) = src[i + 3..].find('}').map(|k| k + i + 3).filter(|&k| k <= i + 10) {
                if let Some((_, stand_in, ascii)) = CATEGORIES.iter().find(|(p, _, _)| *p == &src[i..=close]) {
                    if !inside {
                        out.push('[');
                    }
                    out.push_str(&format!("\\x{{{:X}}}", *stand_in as u32));
                    out.push_str(ascii);
                    if !inside {
                        out.push(']');
                    }
                    i = close + 1;
                    continue;
                }
            }
        }
        out.push(c as char);
        i += 1;
    }
    Ok(ecma_to_rust(&out))
}

/// ECMAScript classes that mean something wider in Rust's Unicode-aware regex syntax.
fn ecma_to_rust(src: &str) -> String {
    let mut out = String::with_capacity(src.len() + 16);
    let mut chars = src.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str("[0-9]"),
            Some('D') => out.push_str("[^0-9]"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('W') => out.push_str("[^0-9A-Za-z_]"),
            Some(o) => {
                out.push('\\');
                out.push(o);
            }
            None => out.push('\\'),
        }
    }
    out
}
