//! Byte-level BPE as llama.cpp does it (`llm_tokenizer_bpe`): split the text into words
//! with the pre-tokenizer, map each byte to its printable stand-in, and within each word
//! repeatedly merge the adjacent pair with the lowest merge rank, leftmost first on ties.
//!
//! llama.cpp looks merges up by the text of both sides; plumb gives every text that can
//! take part in a merge an id once, at load, so merging compares integers. The result is
//! the same: a symbol's id always stands for exactly its text.

use plumb_gguf::Metadata;
use rustc_hash::FxHashMap;

use crate::merge_queue::MergeQueue;
use crate::pretokenize::PreConfig;
use crate::unicode::{self, ByteChars};
use crate::vocab::Vocab;
use crate::TokenizerError;

const KEY_MERGES: &str = "tokenizer.ggml.merges";

/// Marks a symbol whose text takes part in no merge and is no token.
const NO_ID: u32 = u32::MAX;

pub(crate) struct Bpe {
    pre: PreConfig,
    ignore_merges: bool,
    /// `(left id, right id)` packed into a u64, to `(rank, merged id)`.
    merges: FxHashMap<u64, (u32, u32)>,
    /// The id of each byte's stand-in character.
    byte_ids: [u32; 256],
    n_vocab: u32,
}

fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

impl Bpe {
    pub fn new(md: &Metadata, vocab: &Vocab, pre: PreConfig) -> Result<Bpe, TokenizerError> {
        let lines = md.get_str_array(KEY_MERGES)?;
        let n_vocab = vocab.n_tokens() as u32;
        // Texts that are not tokens but appear in merges get ids past the vocabulary.
        let mut extra: FxHashMap<Vec<u8>, u32> = FxHashMap::default();
        let mut intern = |text: &[u8]| -> u32 {
            if let Some(id) = vocab.id_of(text) {
                return id;
            }
            let next = n_vocab + extra.len() as u32;
            *extra.entry(text.to_vec()).or_insert(next)
        };
        let mut merges = FxHashMap::default();
        merges.reserve(lines.len());
        let mut joined = Vec::new();
        for (rank, line) in lines.iter().enumerate() {
            // As llama.cpp: split at the first space after the first byte; a line without
            // one is an empty pair, which matches nothing.
            let Some(split) = line
                .as_bytes()
                .iter()
                .skip(1)
                .position(|&b| b == b' ')
                .map(|p| p + 1)
            else {
                continue;
            };
            let (left, right) = (&line.as_bytes()[..split], &line.as_bytes()[split + 1..]);
            joined.clear();
            joined.extend_from_slice(left);
            joined.extend_from_slice(right);
            let (l, r, m) = (intern(left), intern(right), intern(&joined));
            merges.entry(pair_key(l, r)).or_insert((rank as u32, m));
        }
        let chars = ByteChars::get();
        let mut byte_ids = [NO_ID; 256];
        let mut buf = Vec::new();
        for (b, slot) in byte_ids.iter_mut().enumerate() {
            buf.clear();
            unicode::encode_utf8(chars.char_of(b as u8), &mut buf);
            *slot = vocab
                .id_of(&buf)
                .or_else(|| extra.get(&buf).copied())
                .unwrap_or(NO_ID);
        }
        Ok(Bpe {
            pre,
            ignore_merges: vocab.ignore_merges,
            merges,
            byte_ids,
            n_vocab,
        })
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    start: u32,
    len: u32,
    prev: u32,
    next: u32,
}

const NONE: u32 = u32::MAX;

/// Reusable buffers for one tokenization call.
#[derive(Default)]
pub(crate) struct BpeSession {
    cpts: Vec<u32>,
    words: Vec<(usize, usize)>,
    word: Vec<u8>,
    encoded: Vec<u8>,
    symbols: Vec<Symbol>,
}

impl BpeSession {
    /// Tokenizes one fragment of plain text into `out`.
    pub fn encode(
        &mut self,
        bpe: &Bpe,
        vocab: &Vocab,
        text: &[u8],
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        unicode::decode_lenient(text, &mut self.cpts);
        bpe.pre.split(&self.cpts, &mut self.words);
        for w in 0..self.words.len() {
            let (start, end) = self.words[w];
            self.word.clear();
            for &c in &self.cpts[start..end] {
                if !unicode::encode_utf8(c, &mut self.word) {
                    return Err(TokenizerError::InvalidCodePoint(c));
                }
            }
            if bpe.ignore_merges {
                let chars = ByteChars::get();
                self.encoded.clear();
                for &b in &self.word {
                    unicode::encode_utf8(chars.char_of(b), &mut self.encoded);
                }
                if let Some(id) = vocab.id_of(&self.encoded) {
                    out.push(id);
                    continue;
                }
            }
            self.merge_word(bpe, vocab, out);
        }
        Ok(())
    }

    fn merge_word(&mut self, bpe: &Bpe, vocab: &Vocab, out: &mut Vec<u32>) {
        let n = self.word.len() as u32;
        self.symbols.clear();
        for (i, &b) in self.word.iter().enumerate() {
            let i = i as u32;
            self.symbols.push(Symbol {
                id: bpe.byte_ids[b as usize],
                start: i,
                len: 1,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
            });
        }
        let mut queue = MergeQueue::for_word(self.symbols.len());
        for i in 1..n {
            self.add_bigram(bpe, &mut queue, i - 1, i);
        }
        while let Some((_, (left, right, size))) = queue.pop() {
            let (l, r) = (self.symbols[left as usize], self.symbols[right as usize]);
            if l.len == 0 || r.len == 0 || l.len + r.len != size {
                continue;
            }
            let Some(&(_, merged)) = bpe.merges.get(&pair_key(l.id, r.id)) else {
                continue;
            };
            let sl = &mut self.symbols[left as usize];
            sl.id = merged;
            sl.len += r.len;
            sl.next = r.next;
            self.symbols[right as usize].len = 0;
            if r.next != NONE {
                self.symbols[r.next as usize].prev = left;
            }
            if l.prev != NONE {
                self.add_bigram(bpe, &mut queue, l.prev, left);
            }
            if r.next != NONE {
                self.add_bigram(bpe, &mut queue, left, r.next);
            }
        }

        let mut at = if self.symbols.is_empty() { NONE } else { 0 };
        while at != NONE {
            let s = self.symbols[at as usize];
            if s.id < bpe.n_vocab {
                out.push(s.id);
            } else {
                // Not a token: llama.cpp looks up each byte of the stand-in text on its own,
                // which finds only printable ASCII, and drops the rest.
                for &b in &self.word[s.start as usize..(s.start + s.len) as usize] {
                    if (0x21..=0x7E).contains(&b) {
                        if let Some(id) = vocab.id_of(&[b]) {
                            out.push(id);
                        }
                    }
                }
            }
            at = s.next;
        }
    }

    /// Queues the merge of `left` and `right` if a merge rule joins them: lower ranks first,
    /// the leftmost first within a rank.
    fn add_bigram(&self, bpe: &Bpe, queue: &mut MergeQueue, left: u32, right: u32) {
        let (l, r) = (self.symbols[left as usize], self.symbols[right as usize]);
        if l.id == NO_ID || r.id == NO_ID {
            return;
        }
        if let Some(&(rank, _)) = bpe.merges.get(&pair_key(l.id, r.id)) {
            queue.push(rank, (left, right, l.len + r.len));
        }
    }
}
