//! Tokenizers (SentencePiece and byte-level BPE) and chat templates, from GGUF metadata.
//!
//! The tokenizer reproduces llama.cpp's token ids exactly, including its quirks: a wrong
//! id silently makes wrong text, so "close" is not good enough.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = plumb_gguf::GgufFile::open("model.gguf")?;
//! let tok = plumb_tokenizer::Tokenizer::from_gguf(file.metadata())?;
//! // add_special: BOS/EOS as the model asks; parse_special: "<|im_start|>" in the text
//! // becomes that control token.
//! let prompt = tok.encode("<|im_start|>user\nHi<|im_end|>\n", true, true)?;
//! let ids = tok.encode("Hello world", false, false)?;
//! assert_eq!(tok.decode(&ids)?, "Hello world");
//! let mut stream = tok.stream_decoder(); // for generated tokens
//! let text: String = ids.iter().map(|&id| stream.push(id)).collect::<Result<_, _>>()?;
//! # let _ = (prompt, text);
//! # Ok(()) }
//! ```

mod bpe;
mod chat;
mod decode;
mod error;
mod merge_queue;
mod pretokenize;
mod special;
mod spm;
mod tokenizer;
mod unicode;
mod vocab;

pub use chat::{ChatMessage, ChatTemplate, ChatTemplateError, BUILTIN_TEMPLATES};
pub use decode::StreamDecoder;
pub use error::TokenizerError;
pub use pretokenize::known_pre_types;
pub use tokenizer::Tokenizer;
pub use unicode::byte_level_pieces;
pub use vocab::{TokenizerOptions, VocabKind};
