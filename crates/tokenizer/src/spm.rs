//! SentencePiece tokenization as llama.cpp does it (`llm_tokenizer_spm`): start from single
//! UTF-8 characters and repeatedly merge the adjacent pair whose concatenation is the
//! highest-scoring vocabulary token, leftmost first on ties. Characters that never become
//! tokens fall back to byte tokens.

use crate::merge_queue::MergeQueue;
use crate::unicode::utf8_len;
use crate::vocab::Vocab;
use crate::TokenizerError;

/// What SentencePiece tokenization needs beyond the vocabulary.
pub(crate) struct Spm {
    /// The token for each byte value: `<0xNN>`, else the byte itself as a one-character token.
    bytes: [Option<u32>; 256],
    /// Each token's merge priority: 0 for the highest score, counting distinct scores down.
    /// (A NaN score, which llama.cpp cannot order either, comes last.)
    priority: Vec<u32>,
}

impl Spm {
    pub fn new(vocab: &Vocab) -> Spm {
        let mut bytes = [None; 256];
        for (b, slot) in bytes.iter_mut().enumerate() {
            *slot = vocab
                .id_of(format!("<0x{b:02X}>").as_bytes())
                .or_else(|| vocab.id_of(&[b as u8]));
        }
        // -0.0 and 0.0 compare equal in llama.cpp, so they share a priority.
        let score = |id: u32| {
            let s = vocab.scores[id as usize];
            if s == 0.0 {
                0.0
            } else {
                s
            }
        };
        let mut order: Vec<u32> = (0..vocab.n_tokens() as u32).collect();
        order.sort_by(|&a, &b| score(b).total_cmp(&score(a)));
        let mut priority = vec![0; order.len()];
        let mut rank = 0;
        for (i, &id) in order.iter().enumerate() {
            if i > 0 && score(order[i - 1]).total_cmp(&score(id)).is_ne() {
                rank += 1;
            }
            priority[id as usize] = rank;
        }
        Spm { bytes, priority }
    }

    fn byte_token(&self, b: u8) -> Result<u32, TokenizerError> {
        self.bytes[b as usize].ok_or(TokenizerError::MissingByteToken(b))
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// Reusable buffers for one tokenization call.
#[derive(Default)]
pub(crate) struct SpmSession {
    symbols: Vec<Symbol>,
}

impl SpmSession {
    /// Tokenizes `text` (already space-escaped with U+2581) into `out`.
    pub fn encode(
        &mut self,
        vocab: &Vocab,
        spm: &Spm,
        text: &[u8],
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        self.symbols.clear();
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
        let mut queue = MergeQueue::for_word(self.symbols.len());
        for i in 1..self.symbols.len() {
            self.try_add_bigram(vocab, spm, text, &mut queue, i - 1, i);
        }
        while let Some((_, (left, right, size))) = queue.pop() {
            let (left, right) = (left as usize, right as usize);
            let (l, r) = (self.symbols[left], self.symbols[right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != size as usize {
                continue;
            }
            self.symbols[left].len += r.len;
            self.symbols[right].len = 0;
            self.symbols[left].next = r.next;
            if let Some(n) = r.next {
                self.symbols[n].prev = Some(left);
            }
            if let Some(p) = l.prev {
                self.try_add_bigram(vocab, spm, text, &mut queue, p, left);
            }
            if let Some(n) = r.next {
                self.try_add_bigram(vocab, spm, text, &mut queue, left, n);
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
                        out.push(spm.byte_token(b)?);
                    }
                }
            }
            at = s.next;
        }
        Ok(())
    }

    /// Queues the merge of `left` and `right` if their concatenation is a token: the higher
    /// its score the sooner, the leftmost first among equal scores.
    fn try_add_bigram(
        &self,
        vocab: &Vocab,
        spm: &Spm,
        text: &[u8],
        queue: &mut MergeQueue,
        left: usize,
        right: usize,
    ) {
        let (l, r) = (self.symbols[left], self.symbols[right]);
        let size = l.len + r.len;
        if let Some(id) = vocab.id_of(&text[l.start..l.start + size]) {
            queue.push(
                spm.priority[id as usize],
                (left as u32, right as u32, size as u32),
            );
        }
    }
}
