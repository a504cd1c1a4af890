//! The tokenizer: special-token partition, then SentencePiece or byte-level BPE on each
//! piece of plain text, with BOS/EOS added as the vocabulary asks.

use plumb_gguf::Metadata;

use crate::bpe::{Bpe, BpeSession};
use crate::decode::Pieces;
use crate::special::{self, Fragment, SpecialMatcher};
use crate::spm::{Spm, SpmSession};
use crate::vocab::{attr, TokenizerOptions, Vocab, VocabKind};
use crate::TokenizerError;

/// A tokenizer built from a GGUF file's metadata that gives llama.cpp's token ids.
pub struct Tokenizer {
    pub(crate) vocab: Vocab,
    specials: SpecialMatcher,
    model: Model,
    pub(crate) pieces: Pieces,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind())
            .field("pre", &self.pre())
            .field("n_vocab", &self.n_vocab())
            .finish()
    }
}

enum Model {
    SentencePiece(Box<Spm>),
    BytePairEncoding(Box<Bpe>),
}

impl Tokenizer {
    /// Builds the tokenizer `tokenizer.ggml.*` describes.
    pub fn from_gguf(metadata: &Metadata) -> Result<Tokenizer, TokenizerError> {
        Self::from_gguf_with(metadata, TokenizerOptions::default())
    }

    /// As [`Tokenizer::from_gguf`], with options (a pre-tokenizer override).
    pub fn from_gguf_with(
        metadata: &Metadata,
        options: TokenizerOptions,
    ) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::from_metadata(metadata, &options)?;
        let model = match &vocab.pre {
            None => Model::SentencePiece(Box::new(Spm::new(&vocab))),
            Some((_, pre)) => Model::BytePairEncoding(Box::new(Bpe::new(metadata, &vocab, *pre)?)),
        };
        let specials = SpecialMatcher::new(&vocab);
        let pieces = Pieces::new(&vocab);
        Ok(Tokenizer {
            vocab,
            specials,
            model,
            pieces,
        })
    }

    /// Tokenizes `text` as llama.cpp's `llama_tokenize`.
    ///
    /// `add_special` adds BOS and/or EOS where the vocabulary asks for them
    /// (`tokenizer.ggml.add_bos_token`, `add_eos_token`). `parse_special` lets control
    /// tokens written in the text (`<|im_start|>`) become those tokens; without it they are
    /// tokenized as plain text. User-defined tokens are always recognized.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        self.encode_bytes(text.as_bytes(), add_special, parse_special)
    }

    /// As [`Tokenizer::encode`], for input that may not be valid UTF-8. Malformed bytes are
    /// handled as llama.cpp handles them: byte tokens for SentencePiece, U+FFFD for
    /// byte-level BPE.
    pub fn encode_bytes(
        &self,
        text: &[u8],
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let v = &self.vocab;
        let fragments = special::partition(v, &self.specials, text, parse_special);
        let mut out = Vec::new();
        if add_special && v.add_bos {
            out.extend(v.special.bos);
        }
        match &self.model {
            Model::SentencePiece(spm) => {
                let mut session = SpmSession::default();
                let mut escaped = Vec::new();
                let mut prev_special = true;
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Text(start, end) => {
                            escaped.clear();
                            if v.add_space_prefix && prev_special {
                                escaped.extend_from_slice("\u{2581}".as_bytes());
                            }
                            for &b in &text[start..end] {
                                if b == b' ' {
                                    escaped.extend_from_slice("\u{2581}".as_bytes());
                                } else {
                                    escaped.push(b);
                                }
                            }
                            session.encode(v, spm, &escaped, &mut out)?;
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Model::BytePairEncoding(bpe) => {
                let mut session = BpeSession::default();
                for fragment in &fragments {
                    match *fragment {
                        Fragment::Text(start, end) => {
                            session.encode(bpe, v, &text[start..end], &mut out)?
                        }
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.special.eos);
        }
        Ok(out)
    }

    /// The piece of a token as llama.cpp's `common_token_to_piece` gives it (special
    /// tokens included). An id outside the vocabulary gives an empty piece.
    pub fn token_to_piece(&self, id: u32) -> Vec<u8> {
        self.piece(id, true).map(<[u8]>::to_vec).unwrap_or_default()
    }

    /// The token's text in the vocabulary, as stored (`llama_vocab_get_text`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The id of a token by its exact vocabulary text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id_of(text.as_bytes())
    }

    /// Whether generating this token ends the turn: EOS, EOT, `<|im_end|>`,
    /// `<end_of_turn>` and the other tokens llama.cpp counts as end-of-generation.
    pub fn is_end_of_generation(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// All end-of-generation ids, in increasing order.
    pub fn end_of_generation_ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.vocab.eog.iter().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Whether the token is a control token (never printed unless asked for).
    pub fn is_control(&self, id: u32) -> bool {
        (id as usize) < self.n_vocab() && self.vocab.has_attr(id, attr::CONTROL)
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.special.bos
    }
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.special.eos
    }
    /// The end-of-turn token. When a vocabulary has several candidates (`<|im_end|>` and
    /// `<|endoftext|>`), llama.cpp's pick depends on its hash-map order and plumb takes the
    /// lowest id, so the two can differ; [`Tokenizer::is_end_of_generation`] does not.
    pub fn eot_id(&self) -> Option<u32> {
        self.vocab.special.eot
    }
    pub fn unk_id(&self) -> Option<u32> {
        self.vocab.special.unk
    }
    pub fn pad_id(&self) -> Option<u32> {
        self.vocab.special.pad
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }
    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }

    pub fn kind(&self) -> VocabKind {
        self.vocab.kind
    }

    /// The pre-tokenizer in use (byte-level BPE only).
    pub fn pre(&self) -> Option<&str> {
        self.vocab.pre.as_ref().map(|(name, _)| name.as_str())
    }
}
