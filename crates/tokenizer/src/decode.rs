//! Token ids back to text: the pieces of single tokens, whole-sequence detokenization with
//! llama.cpp's clean-ups, and a streaming decoder for generation.

use crate::unicode::ByteChars;
use crate::vocab::{attr, Vocab, VocabKind};
use crate::{Tokenizer, TokenizerError};

/// Every token's piece as llama.cpp's `token_to_piece(special = true)` gives it, stored
/// end to end.
pub(crate) struct Pieces {
    bytes: Vec<u8>,
    /// `ends[i]` is where token i's piece ends in `bytes`.
    ends: Vec<usize>,
}

impl Pieces {
    pub fn new(vocab: &Vocab) -> Pieces {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(vocab.n_tokens());
        for id in 0..vocab.n_tokens() {
            piece_of(vocab, id, &mut bytes);
            ends.push(bytes.len());
        }
        Pieces { bytes, ends }
    }

    pub fn get(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.bytes[start..end])
    }
}

fn piece_of(vocab: &Vocab, id: usize, out: &mut Vec<u8>) {
    let text = &vocab.texts[id];
    let a = vocab.attrs[id];
    if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
        out.extend_from_slice(text.as_bytes());
    } else if a & attr::NORMAL != 0 {
        match vocab.kind {
            VocabKind::SentencePiece => {
                out.extend_from_slice(text.replace('\u{2581}', " ").as_bytes())
            }
            VocabKind::BytePairEncoding => decode_byte_level(text, out),
        }
    } else if a & attr::BYTE != 0 {
        out.push(byte_token_value(text));
    }
}

/// The byte of a `<0xNN>` token, read as llama.cpp reads it (`strtol` on characters 3 and
/// 4): a malformed one gives whatever prefix parses, or 0.
fn byte_token_value(text: &str) -> u8 {
    let digits = text
        .get(3..)
        .unwrap_or("")
        .chars()
        .take(2)
        .map_while(|c| c.to_digit(16));
    digits.fold(0u32, |acc, d| acc * 16 + d) as u8
}

/// Byte-level BPE stand-in characters back to bytes. A character that stands for no byte
/// is spelled out as llama.cpp does: `[UNK_BYTE_0x<hex>` + the whole token text + `]`.
fn decode_byte_level(text: &str, out: &mut Vec<u8>) {
    let chars = ByteChars::get();
    for c in text.chars() {
        match chars.byte_of(u32::from(c)) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut utf8 = [0u8; 4];
                for b in c.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
}

impl Tokenizer {
    /// The piece of one token, with `special` as in llama.cpp's `llama_token_to_piece`:
    /// without it, control and unknown tokens give nothing.
    pub fn piece(&self, id: u32, special: bool) -> Result<&[u8], TokenizerError> {
        let piece = self.pieces.get(id).ok_or(TokenizerError::TokenOutOfRange {
            id,
            n_vocab: self.n_vocab(),
        })?;
        if !special && self.vocab.has_attr(id, attr::UNKNOWN | attr::CONTROL) {
            return Ok(&[]);
        }
        Ok(piece)
    }

    /// llama.cpp's `llama_detokenize`, byte for byte.
    ///
    /// With `remove_special`, a leading BOS and a trailing EOS are dropped when the
    /// vocabulary adds them; with `unparse_special`, control tokens are written out as
    /// their text instead of being left out. A vocabulary with a space prefix loses one
    /// leading space, and byte-level vocabularies that ask for it get GPT-2's clean-up of
    /// spaces before punctuation and contractions.
    pub fn detokenize(
        &self,
        ids: &[u32],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        let v = &self.vocab;
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && ids.first().is_some_and(|&id| Some(id) == v.special.bos) {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && ids.last().is_some_and(|&id| Some(id) == v.special.eos) {
            ids = &ids[..ids.len() - 1];
        }
        let mut text = Vec::new();
        for &id in ids {
            let mut piece = self.piece(id, unparse_special)?;
            if remove_space {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            remove_space = false;
            text.extend_from_slice(piece);
        }
        if v.clean_spaces {
            clean_up_spaces(&mut text);
        }
        Ok(text)
    }

    /// Decodes ids to text as llama.cpp's `llama_detokenize` with `remove_special = false`
    /// and `unparse_special = false`: BOS/EOS stay, control tokens (BOS and EOS among
    /// them) contribute nothing, user-defined tokens contribute their text. Bytes that do
    /// not form valid UTF-8 become U+FFFD; use [`Tokenizer::detokenize`] for the exact
    /// bytes.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let bytes = self.detokenize(ids, false, false)?;
        Ok(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        })
    }

    /// A decoder that turns generated ids into text as they come, one piece per id.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder {
            tokenizer: self,
            pending: Vec::new(),
        }
    }
}

/// llama.cpp's three clean-up passes for GPT-2 style detokenization, transcribed so that
/// their in-place quirks are kept: drop the space before `?!.,`, the spaces around a lone
/// `'`, and the space before `'s`, `'m`, `'re` and `'ve`.
fn clean_up_spaces(text: &mut Vec<u8>) {
    let n = text.len();
    let mut total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            total -= 1;
        }
        text[total] = x;
        total += 1;
    }

    let n = total;
    total = usize::from(n > 0);
    let mut i = 1;
    while i < n {
        let x = text[i];
        if x == b'\'' && i + 1 < n && text[i - 1] == b' ' && text[i + 1] == b' ' {
            total -= 1;
            i += 1;
            text[i] = 0;
        }
        text[total] = x;
        total += 1;
        i += 1;
    }

    let n = total;
    total = usize::from(n > 0);
    for i in 1..n {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = text[i + 1];
            if matches!(x1, b's' | b'm')
                || (i + 2 < n && matches!((x1, text[i + 2]), (b'r', b'e') | (b'v', b'e')))
            {
                total -= 1;
            }
        }
        text[total] = x;
        total += 1;
    }
    text.truncate(total);
}

/// Turns generated token ids into text incrementally. A character split across several
/// tokens (byte tokens, or byte-level BPE pieces) is held back until it is complete, so
/// the output never contains a broken UTF-8 sequence; bytes that can never become valid
/// UTF-8 come out as U+FFFD.
///
/// Each id contributes its piece without special tokens, as llama.cpp prints generated
/// tokens; unlike [`Tokenizer::decode`] it applies no whole-text clean-up.
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
}

impl StreamDecoder<'_> {
    /// Adds one token and returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending
            .extend_from_slice(self.tokenizer.piece(id, false)?);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid])
                            .expect("prefix checked by from_utf8"),
                    );
                    match e.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Ends the stream: an incomplete character left over becomes U+FFFD.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cleaned(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        clean_up_spaces(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn clean_up_matches_llama_cpp_passes() {
        assert_eq!(cleaned("Hello , world !"), "Hello, world!");
        assert_eq!(cleaned("a ' b"), "a'b");
        assert_eq!(
            cleaned("it 's they 're we 'll I 'd"),
            "it's they're we 'll I 'd"
        );
        assert_eq!(cleaned(""), "");
        assert_eq!(cleaned(" ."), ".");
        assert_eq!(cleaned(". ,"), ".,");
    }

    #[test]
    fn byte_token_values() {
        assert_eq!(byte_token_value("<0x0A>"), 0x0A);
        assert_eq!(byte_token_value("<0xFF>"), 0xFF);
        assert_eq!(byte_token_value("<0xZZ>"), 0);
    }
}
