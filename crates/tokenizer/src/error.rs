use plumb_gguf::GgufError;

/// Everything that can go wrong building or using a tokenizer. Each variant names the key,
/// token or value at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Metadata(#[from] GgufError),
    #[error(
        "tokenizer.ggml.model = {0:?} is not supported (plumb supports \"llama\" and \"gpt2\")"
    )]
    UnsupportedModel(String),
    #[error(
        "tokenizer.ggml.pre = {pre:?} is not a known pre-tokenizer; pass an override to use one of: {}",
        known.join(", ")
    )]
    UnknownPre {
        pre: String,
        known: Vec<&'static str>,
    },
    #[error("pre-tokenizer override {pre:?} is not known; known values: {}", known.join(", "))]
    UnknownPreOverride {
        pre: String,
        known: Vec<&'static str>,
    },
    #[error("{key} has {found} entries but tokenizer.ggml.tokens has {expected}")]
    LengthMismatch {
        key: &'static str,
        found: usize,
        expected: usize,
    },
    #[error("token {text:?} appears twice in tokenizer.ggml.tokens, at ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("{add_key} is true, but {id_key} is not set")]
    AddSpecialWithoutToken {
        add_key: &'static str,
        id_key: &'static str,
    },
    #[error(
        "the vocabulary has no token for byte 0x{0:02X} (neither <0x{0:02X}> nor the raw byte)"
    )]
    MissingByteToken(u8),
    #[error("the input contains the invalid code point 0x{0:X}, beyond U+10FFFF")]
    InvalidCodePoint(u32),
    #[error("token id {id} is out of range (the vocabulary has {n_vocab} tokens)")]
    TokenOutOfRange { id: u32, n_vocab: usize },
}
