//! The individual splitting rules: llama.cpp's regexes, each matched by hand.
//!
//! Rules marked "collapsed" see llama.cpp's collapsed text (one byte per code point, see
//! `unicode::collapsed`), on which `\p{L}` is `[\xD2A-Za-z]`, `\p{N}` is `[\xD10-9]` and so
//! on, and `\s` is C's `isspace`. Rules marked "wide" see the code points themselves with
//! non-ASCII whitespace replaced by `\v`, as llama.cpp feeds them to `std::wregex`.
//! Matching follows `std::regex_iterator`: the leftmost match, the first alternative that
//! succeeds, greedy quantifiers with backtracking; text between matches is a word too.

use super::custom;
use crate::unicode::CharFlags;

/// The text being split, with per-code-point data computed once for all rules.
pub(super) struct Text<'a> {
    pub cpts: &'a [u32],
    pub flags: &'a [CharFlags],
    pub collapsed: &'a [u8],
}

impl Text<'_> {
    /// The code point as `std::wregex` sees it.
    fn wide(&self, i: usize) -> u32 {
        let c = self.cpts[i];
        if c > 0x7F && self.flags[i].is_whitespace() {
            0x0B
        } else {
            c
        }
    }
}

/// Inclusive code point ranges of a literal character class.
pub(super) type Ranges = &'static [(u32, u32)];

/// The letters class of deepseek-llm's second regex, copied range by range from llama.cpp.
pub(super) const DEEPSEEK_LETTERS: Ranges = &[
    (0x0041, 0x005A),
    (0x0061, 0x007A),
    (0x00B5, 0x00B5),
    (0x00C0, 0x00D6),
    (0x00D8, 0x00F6),
    (0x00F8, 0x01BA),
    (0x01BC, 0x01BF),
    (0x01C4, 0x0293),
    (0x0295, 0x02AF),
    (0x0370, 0x0373),
    (0x0376, 0x0376),
    (0x0377, 0x0377),
    (0x037B, 0x037D),
    (0x037F, 0x037F),
    (0x0386, 0x0386),
    (0x0388, 0x038A),
    (0x038C, 0x038C),
    (0x038E, 0x03A1),
    (0x03A3, 0x03F5),
    (0x03F7, 0x0481),
    (0x048A, 0x052F),
    (0x0531, 0x0556),
    (0x10A0, 0x10C5),
    (0x13A0, 0x13F5),
    (0x13F8, 0x13FD),
    (0x1C90, 0x1CBA),
    (0x1CBD, 0x1CBF),
    (0x1D00, 0x1D2B),
    (0x1D6B, 0x1D77),
    (0x1D79, 0x1D9A),
    (0x1E00, 0x1F15),
    (0x1F18, 0x1F1D),
    (0x1F20, 0x1F45),
    (0x1F48, 0x1F4D),
    (0x1F50, 0x1F57),
    (0x1F59, 0x1F59),
    (0x1F5B, 0x1F5B),
    (0x1F5D, 0x1F5D),
    (0x1F5F, 0x1F7D),
    (0x1F80, 0x1FB4),
    (0x1FB6, 0x1FBC),
    (0x1FBE, 0x1FBE),
    (0x1FC2, 0x1FC4),
    (0x1FC6, 0x1FCC),
    (0x1FD0, 0x1FD3),
    (0x1FD6, 0x1FDB),
    (0x1FE0, 0x1FEC),
    (0x1FF2, 0x1FF4),
    (0x1FF6, 0x1FFC),
    (0x2102, 0x2102),
    (0x2107, 0x2107),
    (0x210A, 0x2113),
    (0x2115, 0x2115),
    (0x2119, 0x211D),
    (0x2124, 0x2124),
    (0x2126, 0x2126),
    (0x2128, 0x2128),
    (0x212A, 0x212D),
    (0x212F, 0x2134),
    (0x2139, 0x2139),
    (0x213C, 0x213F),
    (0x2145, 0x2149),
    (0x214E, 0x214E),
    (0x2183, 0x2183),
    (0x2184, 0x2184),
    (0x2C00, 0x2C7B),
    (0x2C7E, 0x2CE4),
    (0x2CEB, 0x2CEE),
    (0x2CF2, 0x2CF2),
    (0x2CF3, 0x2CF3),
    (0xA640, 0xA66D),
    (0xA680, 0xA69B),
    (0xA722, 0xA76F),
    (0xA771, 0xA787),
    (0xA78B, 0xA78E),
    (0xAB70, 0xABBF),
    (0xFB00, 0xFB06),
    (0xFB13, 0xFB17),
    (0xFF21, 0xFF3A),
    (0xFF41, 0xFF5A),
    (0x10400, 0x1044F),
    (0x104B0, 0x104D3),
    (0x104D8, 0x104FB),
    (0x10C80, 0x10CB2),
    (0x10CC0, 0x10CF2),
    (0x118A0, 0x118DF),
    (0x1E900, 0x1E943),
];

/// `[!-/:-~！-／：-～‘-‟　-。]`. U+3000 is listed but can never match: it is whitespace, so
/// llama.cpp has already turned it into `\v`.
pub(super) const DEEPSEEK_PUNCTUATION: Ranges = &[
    (0x21, 0x2F),
    (0x3A, 0x7E),
    (0xFF01, 0xFF0F),
    (0xFF1A, 0xFF5E),
    (0x2018, 0x201F),
    (0x3000, 0x3002),
];

/// `[一-龥ࠀ-一가-퟿]`.
pub(super) const DEEPSEEK_CJK: Ranges = &[(0x4E00, 0x9FA5), (0x0800, 0x4E00), (0xAC00, 0xD7FF)];

fn in_ranges(ranges: Ranges, c: u32) -> bool {
    ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi)
}

/// C's `isspace` in the "C" locale, which is what `\s` means to `std::regex` and `std::wregex`.
fn is_c_space(c: u32) -> bool {
    matches!(c, 0x09..=0x0D | 0x20)
}

// Classes on collapsed bytes.
fn is_letter(b: u8) -> bool {
    b == 0xD2 || b.is_ascii_alphabetic()
}
fn is_number(b: u8) -> bool {
    b == 0xD1 || b.is_ascii_digit()
}
fn is_punctuation(b: u8) -> bool {
    b == 0xD3 || b"!\"#%&'()*,-./:;?@[\\]_{}".contains(&b)
}
fn is_space(b: u8) -> bool {
    is_c_space(u32::from(b))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
    /// llama.cpp's hand-written GPT-2 splitter.
    Gpt2,
    /// llama.cpp's hand-written Llama 3 splitter.
    Llama3,
    /// Collapsed: Qwen2's `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|
    /// [^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
    /// with `marks` (Qwen3.5), `\p{M}` joins `\p{L}` in the letter runs and leaves the
    /// punctuation class.
    Qwen2 { marks: bool },
    /// Collapsed: `\p{N}`.
    SingleNumber,
    /// Collapsed: `\p{N}+`.
    NumberRun,
    /// Collapsed: `[\p{P}\$\+<=>\^~\|]+`, with a backtick too for Falcon.
    PunctuationRun { backtick: bool },
    /// Collapsed: `\s?\p{L}+`.
    SpaceThenLetters,
    /// Collapsed: `\s?\p{P}+`.
    SpaceThenPunctuation,
    /// Wide: `[0-9][0-9][0-9]`.
    AsciiDigitTriples,
    /// Wide: `[\r\n]`.
    LineBreak,
    /// Wide: `\s?[...]+`.
    SpaceThenWide(Ranges),
    /// Wide: `\s+$`.
    TrailingSpace,
    /// Wide: `[...]+`.
    WideRun(Ranges),
}

impl Rule {
    pub fn needs_flags(self) -> bool {
        !self.needs_collapsed()
    }

    pub fn needs_collapsed(self) -> bool {
        matches!(
            self,
            Rule::Qwen2 { .. }
                | Rule::SingleNumber
                | Rule::NumberRun
                | Rule::PunctuationRun { .. }
                | Rule::SpaceThenLetters
                | Rule::SpaceThenPunctuation
        )
    }

    /// Splits code points `start..end` into words, appended to `out` in order.
    pub fn split(self, text: &Text, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
        let c = text.collapsed;
        let run = |mut i: usize, class: &dyn Fn(usize) -> bool| {
            while i < end && class(i) {
                i += 1;
            }
            i
        };
        match self {
            Rule::Gpt2 => custom::split_gpt2(text.cpts, text.flags, start, end, out),
            Rule::Llama3 => custom::split_llama3(text.cpts, text.flags, start, end, out),
            Rule::Qwen2 { marks } => matches(start, end, out, |p| qwen2_at(c, p, end, marks)),
            Rule::SingleNumber => matches(start, end, out, |p| is_number(c[p]).then_some(p + 1)),
            Rule::NumberRun => matches(start, end, out, |p| {
                is_number(c[p]).then(|| run(p, &|i| is_number(c[i])))
            }),
            Rule::PunctuationRun { backtick } => {
                let class = |i: usize| {
                    let b = c[i];
                    is_punctuation(b) || b"$+<=>^~|".contains(&b) || (backtick && b == b'`')
                };
                matches(start, end, out, |p| class(p).then(|| run(p, &class)))
            }
            Rule::SpaceThenLetters => {
                let class = |i: usize| is_letter(c[i]);
                matches(start, end, out, |p| {
                    space_then(p, end, &|i| is_space(c[i]), &class).map(|q| run(q, &class))
                })
            }
            Rule::SpaceThenPunctuation => {
                let class = |i: usize| is_punctuation(c[i]);
                matches(start, end, out, |p| {
                    space_then(p, end, &|i| is_space(c[i]), &class).map(|q| run(q, &class))
                })
            }
            Rule::AsciiDigitTriples => matches(start, end, out, |p| {
                let digit = |i: usize| (0x30..=0x39).contains(&text.wide(i));
                (p + 2 < end && digit(p) && digit(p + 1) && digit(p + 2)).then_some(p + 3)
            }),
            Rule::LineBreak => matches(start, end, out, |p| {
                matches!(text.wide(p), 0x0A | 0x0D).then_some(p + 1)
            }),
            Rule::SpaceThenWide(ranges) => {
                let class = |i: usize| in_ranges(ranges, text.wide(i));
                let space = |i: usize| is_c_space(text.wide(i));
                matches(start, end, out, |p| {
                    space_then(p, end, &space, &class).map(|q| run(q, &class))
                })
            }
            Rule::TrailingSpace => {
                // The only match is the all-whitespace suffix; finding it directly keeps
                // long whitespace runs linear where a leftmost search would not be.
                let mut suffix = end;
                while suffix > start && is_c_space(text.wide(suffix - 1)) {
                    suffix -= 1;
                }
                for word in [(start, suffix), (suffix, end)] {
                    if word.1 > word.0 {
                        out.push(word);
                    }
                }
            }
            Rule::WideRun(ranges) => {
                let class = |i: usize| in_ranges(ranges, text.wide(i));
                matches(start, end, out, |p| class(p).then(|| run(p, &class)))
            }
        }
    }
}

/// `std::regex_iterator` over `start..end`: `match_at(p)` gives the end of the match at
/// `p`, if the pattern matches there. Matches and the gaps between them become words.
fn matches(
    start: usize,
    end: usize,
    out: &mut Vec<(usize, usize)>,
    mut match_at: impl FnMut(usize) -> Option<usize>,
) {
    let mut gap_start = start;
    let mut p = start;
    while p < end {
        match match_at(p) {
            Some(match_end) => {
                if p > gap_start {
                    out.push((gap_start, p));
                }
                out.push((p, match_end));
                p = match_end;
                gap_start = p;
            }
            None => p += 1,
        }
    }
    if gap_start < end {
        out.push((gap_start, end));
    }
}

/// `\s?X`: where the `X+` part starts if the pattern matches at `p`. The optional space is
/// greedy but gives way when no `X` follows it.
fn space_then(
    p: usize,
    end: usize,
    space: &dyn Fn(usize) -> bool,
    class: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    if space(p) && p + 1 < end && class(p + 1) {
        Some(p + 1)
    } else if class(p) {
        Some(p)
    } else {
        None
    }
}

/// The Qwen2 regex at `p` (see [`Rule::Qwen2`]); every code point starts some match.
fn qwen2_at(c: &[u8], p: usize, end: usize, marks: bool) -> Option<usize> {
    let in_word = |b: u8| is_letter(b) || (marks && b == 0xD4);
    let at = |i: usize| (i < end).then(|| c[i]);
    let c0 = c[p];

    // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
    if c0 == b'\'' {
        let next = at(p + 1).map(|b| b.to_ascii_lowercase());
        let next2 = at(p + 2).map(|b| b.to_ascii_lowercase());
        match (next, next2) {
            (Some(b's' | b't' | b'm' | b'd'), _) => return Some(p + 2),
            (Some(b'r' | b'v'), Some(b'e')) | (Some(b'l'), Some(b'l')) => return Some(p + 3),
            _ => {}
        }
    }

    let letters_from = |mut i: usize| {
        while i < end && in_word(c[i]) {
            i += 1;
        }
        i
    };
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if !(c0 == b'\r' || c0 == b'\n' || is_letter(c0) || is_number(c0))
        && at(p + 1).is_some_and(is_letter)
    {
        return Some(letters_from(p + 1));
    }
    if is_letter(c0) {
        return Some(letters_from(p));
    }

    // \p{N}
    if is_number(c0) {
        return Some(p + 1);
    }

    // ?[^\s\p{L}\p{N}]+[\r\n]*
    let other = |b: u8| !(is_space(b) || in_word(b) || is_number(b));
    let first = if c0 == b' ' && at(p + 1).is_some_and(other) {
        p + 1
    } else {
        p
    };
    if other(c[first]) {
        let mut i = first;
        while i < end && other(c[i]) {
            i += 1;
        }
        while i < end && (c[i] == b'\r' || c[i] == b'\n') {
            i += 1;
        }
        return Some(i);
    }

    // \s*[\r\n]+ | \s+(?!\S) | \s+
    if is_space(c0) {
        let mut i = p;
        let mut after_last_newline = None;
        while i < end && is_space(c[i]) {
            if c[i] == b'\r' || c[i] == b'\n' {
                after_last_newline = Some(i + 1);
            }
            i += 1;
        }
        return Some(match after_last_newline {
            Some(newline_end) => newline_end,
            None if i == end || i - p < 2 => i,
            None => i - 1,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unicode;

    fn split(rule: Rule, s: &str) -> Vec<String> {
        let cpts: Vec<u32> = s.chars().map(u32::from).collect();
        let flags: Vec<CharFlags> = cpts.iter().map(|&c| unicode::flags(c)).collect();
        let collapsed: Vec<u8> = cpts.iter().map(|&c| unicode::collapsed(c)).collect();
        let text = Text {
            cpts: &cpts,
            flags: &flags,
            collapsed: &collapsed,
        };
        let mut out = Vec::new();
        rule.split(&text, 0, cpts.len(), &mut out);
        out.iter()
            .map(|&(a, b)| s.chars().skip(a).take(b - a).collect())
            .collect()
    }

    #[test]
    fn qwen2_follows_regex_alternation_order() {
        assert_eq!(
            split(Rule::Qwen2 { marks: false }, "I'm here  123 (ok)\n\n  x"),
            ["I", "'m", " here", " ", " ", "1", "2", "3", " (", "ok", ")\n\n", " ", " x"]
        );
        assert_eq!(
            split(Rule::Qwen2 { marks: false }, "a  \n b"),
            ["a", "  \n", " b"]
        );
        assert_eq!(
            split(Rule::Qwen2 { marks: false }, "end   "),
            ["end", "   "]
        );
    }

    #[test]
    fn digits_and_punctuation_rules() {
        assert_eq!(split(Rule::SingleNumber, "ab12"), ["ab", "1", "2"]);
        assert_eq!(
            split(Rule::AsciiDigitTriples, "1234567"),
            ["123", "456", "7"]
        );
        assert_eq!(
            split(Rule::PunctuationRun { backtick: false }, "a+=b.`"),
            ["a", "+=", "b", ".", "`"]
        );
        assert_eq!(split(Rule::TrailingSpace, "a b  "), ["a b", "  "]);
    }
}
