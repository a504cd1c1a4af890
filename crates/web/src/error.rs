use plumb_engine::EngineError;
use plumb_gguf::GgufError;
use plumb_model::ModelError;
use plumb_tokenizer::TokenizerError;

use crate::model_bytes::MAX_MODEL_BYTES;

/// Everything that can go wrong in the page's API; the page shows the message as it is.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "the model file is {len} bytes ({:.2} GiB); in the browser plumb loads files of at \
         most {MAX_MODEL_BYTES} bytes (2 GiB, the largest buffer of 32-bit WebAssembly)",
        *len as f64 / (1u64 << 30) as f64
    )]
    TooLarge { len: u64 },
    #[error("the model file is empty")]
    Empty,
    #[error(
        "cannot allocate {len} bytes of WebAssembly memory for the model file (the browser \
         refused: too little memory free?)"
    )]
    OutOfMemory { len: u64 },
    #[error("the model file was announced as {expected} bytes, and more arrived ({received})")]
    TooManyBytes { expected: u64, received: u64 },
    #[error("the model file was announced as {expected} bytes, and only {received} arrived")]
    TooFewBytes { expected: u64, received: u64 },
    #[error(
        "this WebAssembly instance already holds a model; load another one in a new instance \
         (the page starts a new Worker)"
    )]
    AlreadyLoaded,
    #[error("no reply is being generated; send a message first")]
    NoReply,
    #[error("a reply is being generated; stop it or let it finish first")]
    Busy,
    #[error("{0}")]
    Settings(String),
    #[error("the token callback failed: {0}")]
    Callback(String),
    #[error("the model file cannot be read: {0}")]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}
