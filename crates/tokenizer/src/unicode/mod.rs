//! Code point classes and UTF-8 handling with llama.cpp's exact semantics.
//!
//! llama.cpp's pre-tokenizers classify code points with its own tables (copied here in
//! `tables.rs`) and decode UTF-8 leniently; a different Unicode version or a stricter decoder
//! would move token boundaries, so neither comes from the standard library.

mod tables;

use std::sync::OnceLock;

/// The class of one code point: one general category and whether it is whitespace.
///
/// `CharFlags::NONE` stands for "past the end of the text", which llama.cpp's hand-written
/// splitters treat as matching no class at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CharFlags(u16);

impl CharFlags {
    pub const NONE: CharFlags = CharFlags(0);
    const UNDEFINED: u16 = 0x01;
    const NUMBER: u16 = 0x02;
    const LETTER: u16 = 0x04;
    const ACCENT_MARK: u16 = 0x10;
    const PUNCTUATION: u16 = 0x20;
    const SYMBOL: u16 = 0x40;
    const WHITESPACE: u16 = 0x100;
    const CATEGORIES: u16 = 0xFF;

    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    /// False only for `NONE`: every real code point has a category, "undefined" included.
    pub fn is_some(self) -> bool {
        self.0 != 0
    }

    /// The single byte that stands for this code point in llama.cpp's "collapsed" text, on
    /// which its `std::regex` patterns run: ASCII stays itself, other whitespace becomes
    /// `\v`, and everything else becomes a marker byte for its category.
    fn collapsed(self) -> u8 {
        if self.is_whitespace() {
            return 0x0B;
        }
        match self.0 & Self::CATEGORIES {
            Self::NUMBER => 0xD1,
            Self::LETTER => 0xD2,
            Self::PUNCTUATION => 0xD3,
            Self::ACCENT_MARK => 0xD4,
            Self::SYMBOL => 0xD5,
            _ => 0xD0,
        }
    }
}

const MAX_CODEPOINTS: usize = 0x11_0000;

/// One byte per code point: the category flag's bit index in bits 0..3, whitespace in bit 3.
fn class_table() -> &'static [u8] {
    static TABLE: OnceLock<Box<[u8]>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![0u8; MAX_CODEPOINTS].into_boxed_slice();
        for pair in tables::CATEGORY_RANGES.windows(2) {
            let (start, flags) = pair[0];
            let end = pair[1].0;
            let code = flags.trailing_zeros() as u8;
            table[start as usize..end as usize].fill(code);
        }
        for &c in &tables::WHITESPACE {
            table[c as usize] |= 0x08;
        }
        table
    })
}

/// The class of a code point; values past U+10FFFF are "undefined", as in llama.cpp.
pub(crate) fn flags(cpt: u32) -> CharFlags {
    match class_table().get(cpt as usize) {
        Some(&code) => {
            let category = 1u16 << (code & 0x07);
            let whitespace = if code & 0x08 != 0 {
                CharFlags::WHITESPACE
            } else {
                0
            };
            CharFlags(category | whitespace)
        }
        None => CharFlags(CharFlags::UNDEFINED),
    }
}

/// The collapsed byte of a code point (see [`CharFlags::collapsed`]).
pub(crate) fn collapsed(cpt: u32) -> u8 {
    if cpt < 0x80 {
        cpt as u8
    } else {
        flags(cpt).collapsed()
    }
}

/// The byte length llama.cpp assumes for a UTF-8 sequence from its first byte alone.
pub(crate) fn utf8_len(first: u8) -> usize {
    const LOOKUP: [usize; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4];
    LOOKUP[(first >> 4) as usize]
}

/// Decodes UTF-8 the way llama.cpp's `unicode_cpts_from_utf8` does: a malformed sequence
/// yields U+FFFD and skips one byte; overlong forms and surrogates are not rejected.
pub(crate) fn decode_lenient(bytes: &[u8], out: &mut Vec<u32>) {
    out.clear();
    out.reserve(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match decode_one(bytes, i) {
            Some((cpt, len)) => {
                out.push(cpt);
                i += len;
            }
            None => {
                out.push(0xFFFD);
                i += 1;
            }
        }
    }
}

fn decode_one(b: &[u8], i: usize) -> Option<(u32, usize)> {
    let b0 = b[i];
    let cont = |k: usize| {
        b.get(i + k)
            .filter(|&&c| c & 0xC0 == 0x80)
            .map(|&c| u32::from(c & 0x3F))
    };
    if b0 & 0x80 == 0 {
        Some((u32::from(b0), 1))
    } else if b0 & 0x40 == 0 {
        None
    } else if b0 & 0x20 == 0 {
        Some(((u32::from(b0 & 0x1F) << 6) | cont(1)?, 2))
    } else if b0 & 0x10 == 0 {
        let (c1, c2) = (cont(1)?, cont(2)?);
        Some(((u32::from(b0 & 0x0F) << 12) | (c1 << 6) | c2, 3))
    } else if b0 & 0x08 == 0 {
        let (c1, c2, c3) = (cont(1)?, cont(2)?, cont(3)?);
        Some((
            (u32::from(b0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3,
            4,
        ))
    } else {
        None
    }
}

/// Appends the UTF-8 encoding of any code point up to U+10FFFF, surrogates included (they
/// can come out of [`decode_lenient`]). Returns false for larger values, which llama.cpp
/// rejects with an exception.
pub(crate) fn encode_utf8(cpt: u32, out: &mut Vec<u8>) -> bool {
    match cpt {
        0..=0x7F => out.push(cpt as u8),
        0x80..=0x7FF => {
            out.extend_from_slice(&[0xC0 | (cpt >> 6) as u8, 0x80 | (cpt & 0x3F) as u8])
        }
        0x800..=0xFFFF => out.extend_from_slice(&[
            0xE0 | (cpt >> 12) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]),
        0x1_0000..=0x10_FFFF => out.extend_from_slice(&[
            0xF0 | (cpt >> 18) as u8,
            0x80 | ((cpt >> 12) & 0x3F) as u8,
            0x80 | ((cpt >> 6) & 0x3F) as u8,
            0x80 | (cpt & 0x3F) as u8,
        ]),
        _ => return false,
    }
    true
}

/// GPT-2's reversible map from bytes to printable code points, used by byte-level BPE
/// vocabularies: printable Latin-1 bytes map to themselves, the rest to U+0100 and up.
pub(crate) struct ByteChars {
    to_char: [u32; 256],
}

impl ByteChars {
    pub fn get() -> &'static ByteChars {
        static MAP: OnceLock<ByteChars> = OnceLock::new();
        MAP.get_or_init(|| {
            let printable = |b: u32| {
                (0x21..=0x7E).contains(&b)
                    || (0xA1..=0xAC).contains(&b)
                    || (0xAE..=0xFF).contains(&b)
            };
            let mut to_char = [0u32; 256];
            let mut next = 256;
            for b in 0..256u32 {
                to_char[b as usize] = if printable(b) {
                    b
                } else {
                    next += 1;
                    next - 1
                };
            }
            ByteChars { to_char }
        })
    }

    /// The code point that stands for `byte`.
    pub fn char_of(&self, byte: u8) -> u32 {
        self.to_char[byte as usize]
    }

    /// The byte a code point stands for, if it is one of the 256.
    pub fn byte_of(&self, cpt: u32) -> Option<u8> {
        match cpt {
            0..=0xFF if self.to_char[cpt as usize] == cpt => Some(cpt as u8),
            0x100..=0x143 => self.to_char.iter().position(|&c| c == cpt).map(|b| b as u8),
            _ => None,
        }
    }
}

/// The 256 byte pieces of a byte-level BPE vocabulary (GPT-2's), in byte order: each byte's
/// stand-in character. A vocabulary made of them alone tokenizes any text, one token a byte:
/// what tests use where no real vocabulary is wanted.
pub fn byte_level_pieces() -> Vec<String> {
    let map = ByteChars::get();
    (0..=255u8)
        .map(|b| {
            char::from_u32(map.char_of(b))
                .expect("stand-ins are characters")
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_match_llama_cpp_tables() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('Ж' as u32).is_letter());
        assert!(flags('7' as u32).is_number());
        assert!(flags('²' as u32).is_number());
        assert!(flags(' ' as u32).is_whitespace());
        assert!(flags(0x3000).is_whitespace());
        assert!(
            !flags(0x1C).is_whitespace(),
            "llama.cpp does not count U+001C as whitespace"
        );
        assert_eq!(collapsed('日' as u32), 0xD2);
        assert_eq!(collapsed('!' as u32), b'!');
        assert_eq!(collapsed(0xA0), 0x0B);
        assert_eq!(collapsed('€' as u32), 0xD5);
        assert_eq!(collapsed(0x0301), 0xD4);
        assert!(flags(0x11_0000).is_some());
    }

    #[test]
    fn lenient_decoding_replaces_one_byte_at_a_time() {
        let mut cpts = Vec::new();
        decode_lenient(b"a\xE2\x82b\xED\xA0\x80", &mut cpts);
        assert_eq!(cpts, [0x61, 0xFFFD, 0xFFFD, 0x62, 0xD800]);
        decode_lenient("é😀".as_bytes(), &mut cpts);
        assert_eq!(cpts, [0xE9, 0x1F600]);
    }

    #[test]
    fn byte_chars_round_trip() {
        let map = ByteChars::get();
        assert_eq!(map.char_of(b' '), 0x120);
        assert_eq!(map.char_of(b'\n'), 0x10A);
        assert_eq!(map.char_of(b'A'), 'A' as u32);
        for b in 0..=255u8 {
            assert_eq!(map.byte_of(map.char_of(b)), Some(b));
        }
        assert_eq!(map.byte_of(0x144), None);
    }
}
