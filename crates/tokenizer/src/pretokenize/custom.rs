//! llama.cpp's hand-written splitters for the GPT-2 and Llama 3 regexes
//! (`unicode_regex_split_custom_gpt2` and `..._llama3` in its `unicode.cpp`).
//!
//! They are not exactly the regexes they stand for (GPT-2's gains a trailing `\s+`, and
//! everything past the end of the piece being split counts as "no class"), so they are
//! reproduced step by step rather than derived from the patterns.

use crate::unicode::CharFlags;

/// A piece of text being split: code points `start..end`, with their classes.
struct Piece<'a> {
    cpts: &'a [u32],
    flags: &'a [CharFlags],
    start: usize,
    end: usize,
    /// Where the next word starts.
    word_start: usize,
}

/// Stands for "past the end of the piece"; no code point has this value.
const OUT_OF_RANGE: u32 = u32::MAX;

impl Piece<'_> {
    fn cpt(&self, pos: usize) -> u32 {
        if pos >= self.start && pos < self.end {
            self.cpts[pos]
        } else {
            OUT_OF_RANGE
        }
    }

    fn flags(&self, pos: usize) -> CharFlags {
        if pos >= self.start && pos < self.end {
            self.flags[pos]
        } else {
            CharFlags::NONE
        }
    }

    /// Ends the current word at `end` (an empty word is dropped).
    fn word(&mut self, end: usize, out: &mut Vec<(usize, usize)>) {
        if end > self.word_start {
            out.push((self.word_start, end));
        }
        self.word_start = end;
    }

    /// Length of the whitespace run at `pos`, and the position just after its last `\r` or
    /// `\n` (0 if it has none).
    fn whitespace_run(&self, pos: usize) -> (usize, usize) {
        let mut n = 0;
        let mut after_last_newline = 0;
        while self.flags(pos + n).is_whitespace() {
            if matches!(self.cpt(pos + n), 0x0D | 0x0A) {
                after_last_newline = pos + n + 1;
            }
            n += 1;
        }
        (n, after_last_newline)
    }
}

fn is_word_char(f: CharFlags) -> bool {
    f.is_whitespace() || f.is_letter() || f.is_number()
}

/// `'s|'t|'re|'ve|'m|'ll|'d`: the length of the contraction at `pos`, if any.
/// `fold` maps a code point to lower case (the identity for GPT-2, which is case sensitive).
fn contraction(p: &Piece, pos: usize, fold: fn(u32) -> u32) -> Option<usize> {
    if p.cpt(pos) != u32::from(b'\'') || pos + 1 >= p.end {
        return None;
    }
    let next = fold(p.cpt(pos + 1));
    if b"stmd".iter().any(|&c| next == u32::from(c)) {
        return Some(2);
    }
    if pos + 2 < p.end {
        let next2 = fold(p.cpt(pos + 2));
        let pair = |a: u8, b: u8| next == u32::from(a) && next2 == u32::from(b);
        if pair(b'r', b'e') || pair(b'v', b'e') || pair(b'l', b'l') {
            return Some(3);
        }
    }
    None
}

/// llama.cpp lowers case with its Unicode table here, but the only code points it maps to
/// the letters of a contraction are their ASCII capitals.
fn ascii_lower(c: u32) -> u32 {
    if (0x41..=0x5A).contains(&c) {
        c + 0x20
    } else {
        c
    }
}

/// GPT-2: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
pub(super) fn split_gpt2(
    cpts: &[u32],
    flags: &[CharFlags],
    start: usize,
    end: usize,
    out: &mut Vec<(usize, usize)>,
) {
    let mut p = Piece {
        cpts,
        flags,
        start,
        end,
        word_start: start,
    };
    let mut pos = start;
    while pos < end {
        let cpt = p.cpt(pos);
        let f = p.flags(pos);
        if let Some(len) = contraction(&p, pos, |c| c) {
            pos += len;
            p.word(pos, out);
            continue;
        }
        let space = usize::from(cpt == u32::from(b' '));
        let mut f2 = if space == 1 { p.flags(pos + 1) } else { f };
        let class: Option<fn(CharFlags) -> bool> = if f2.is_letter() {
            Some(CharFlags::is_letter)
        } else if f2.is_number() {
            Some(CharFlags::is_number)
        } else if !is_word_char(f2) && f2.is_some() {
            Some(|f| !is_word_char(f) && f.is_some())
        } else {
            None
        };
        if let Some(in_class) = class {
            pos += space;
            while in_class(f2) {
                pos += 1;
                f2 = p.flags(pos);
            }
            p.word(pos, out);
            continue;
        }
        let (n_space, _) = p.whitespace_run(pos);
        if n_space > 1 && p.cpt(pos + n_space) != OUT_OF_RANGE {
            pos += n_space - 1;
        } else if n_space > 0 {
            pos += n_space;
        } else {
            pos += 1;
        }
        p.word(pos, out);
    }
}

/// Llama 3: `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
/// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`.
pub(super) fn split_llama3(
    cpts: &[u32],
    flags: &[CharFlags],
    start: usize,
    end: usize,
    out: &mut Vec<(usize, usize)>,
) {
    let mut p = Piece {
        cpts,
        flags,
        start,
        end,
        word_start: start,
    };
    let mut pos = start;
    let is_newline = |c: u32| c == 0x0D || c == 0x0A;
    while pos < end {
        let cpt = p.cpt(pos);
        let f = p.flags(pos);
        if let Some(len) = contraction(&p, pos, ascii_lower) {
            pos += len;
            p.word(pos, out);
            continue;
        }
        if !(is_newline(cpt) || f.is_number()) && (f.is_letter() || p.flags(pos + 1).is_letter()) {
            pos += 1;
            while p.flags(pos).is_letter() {
                pos += 1;
            }
            p.word(pos, out);
            continue;
        }
        if f.is_number() {
            let mut group_start = pos;
            while p.flags(pos).is_number() {
                pos += 1;
                if pos - group_start >= 3 {
                    p.word(pos, out);
                    group_start = pos;
                }
            }
            p.word(pos, out);
            continue;
        }
        let space = usize::from(cpt == u32::from(b' '));
        let mut f2 = if space == 1 { p.flags(pos + 1) } else { f };
        // llama.cpp tests the class of `pos` itself here, not of the character after the
        // space, so a lone trailing space takes this branch.
        if !is_word_char(f2) && f.is_some() {
            pos += space;
            while !is_word_char(f2) && f2.is_some() {
                pos += 1;
                f2 = p.flags(pos);
            }
            while is_newline(p.cpt(pos)) {
                pos += 1;
            }
            p.word(pos, out);
            continue;
        }
        let (n_space, after_last_newline) = p.whitespace_run(pos);
        if after_last_newline > 0 {
            pos = after_last_newline;
        } else if n_space > 1 && p.cpt(pos + n_space) != OUT_OF_RANGE {
            pos += n_space - 1;
        } else if n_space > 0 {
            pos += n_space;
        } else {
            pos += 1;
        }
        p.word(pos, out);
    }
}
