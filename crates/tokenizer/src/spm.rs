//! SentencePiece tokenization as llama.cpp does it (`llm_tokenizer_spm`): start from single
//! UTF-8 characters and repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring vocabulary token, leftmost first on ties. Characters that never become
//! tokens fall back to byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::unicode::utf8_len;
use crate::vocab::Vocab;
use crate::TokenizerError;

/// The token for each byte value: `<0xNN>`, else the byte itself as a one-character token.
pub(crate) struct ByteTokens([Option<u32>; 256]);

impl ByteTokens {
    pub fn new(vocab: &Vocab) -> ByteTokens {
        let mut ids = [None; 256];
        for (b, slot) in ids.iter_mut().enumerate() {
            *slot = vocab
                .id_of(format!("<0x{b:02X}>").as_bytes())
                .or_else(|| vocab.id_of(&[b as u8]));
        }
        ByteTokens(ids)
    }

    pub fn get(&self, b: u8) -> Result<u32, TokenizerError> {
        self.0[b as usize].ok_or(TokenizerError::MissingByteToken(b))
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A candidate merge of `left` with the symbol after it.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Higher score first, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Reusable buffers for one tokenization call.
#[derive(Default)]
pub(crate) struct SpmSession {
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
}

impl SpmSession {
    /// Tokenizes `text` (already space-escaped with U+2581) into `out`.
    pub fn encode(
        &mut self,
        vocab: &Vocab,
        bytes: &ByteTokens,
        text: &[u8],
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        self.symbols.clear();
        self.queue.clear();
        let mut offset = 0;
        while offset < text.len() {
            let len = utf8_len(text[offset]).min(text.len() - offset);
            let index = self.symbols.len();
            self.symbols.push(Symbol {
                start: offset,
                len,
                prev: index.checked_sub(1),
                next: (offset + len < text.len()).then_some(index + 1),
            });
            offset += len;
        }
        for i in 1..self.symbols.len() {
            self.try_add_bigram(vocab, text, i - 1, i);
        }
        while let Some(bigram) = self.queue.pop() {
            let (left, right) = (self.symbols[bigram.left], self.symbols[bigram.right]);
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.size {
                continue;
            }
            self.symbols[bigram.left].len += right.len;
            self.symbols[bigram.right].len = 0;
            self.symbols[bigram.left].next = right.next;
            if let Some(n) = right.next {
                self.symbols[n].prev = Some(bigram.left);
            }
            if let Some(p) = left.prev {
                self.try_add_bigram(vocab, text, p, bigram.left);
            }
            if let Some(n) = right.next {
                self.try_add_bigram(vocab, text, bigram.left, n);
            }
        }

        let mut at = if self.symbols.is_empty() {
            None
        } else {
            Some(0)
        };
        while let Some(i) = at {
            let s = self.symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match vocab.id_of(piece) {
                Some(id) => out.push(id),
                None => {
                    for &b in piece {
                        out.push(bytes.get(b)?);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }

    fn try_add_bigram(&mut self, vocab: &Vocab, text: &[u8], left: usize, right: usize) {
        let (l, r) = (self.symbols[left], self.symbols[right]);
        let size = l.len + r.len;
        if let Some(id) = vocab.id_of(&text[l.start..l.start + size]) {
            self.queue.push(Bigram {
                score: vocab.scores[id as usize],
                left,
                right,
                size,
            });
        }
    }
}
