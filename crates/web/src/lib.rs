//! plumb in the browser: the API that the chat page's Web Worker calls through wasm-bindgen.
//!
//! - [`ModelBytes`]: the page streams a `.gguf` file (a picked `File` or a `fetch` response)
//!   chunk by chunk into one buffer of wasm memory, allocated once from the file's length;
//!   the GGUF reader then borrows the weights from that buffer, so the file is held once.
//! - [`WebChat`]: the model, its tokenizer and a chat in the model's template (the engine's
//!   [`plumb_engine::ChatSession`], as `plumb run --chat` uses), generated one forward pass at
//!   a time, so that the Worker streams each token to the page and takes a stop request
//!   between tokens.
//!
//! Both are plain Rust, tested natively; `bindings` exports them to JavaScript, where every
//! error becomes an exception carrying the error's message (never a panic's trace).

mod bindings;
mod chat;
mod error;
mod model_bytes;

pub use chat::{ChatSettings, Reply, WebChat};
pub use error::WebError;
pub use model_bytes::{ModelBytes, MAX_MODEL_BYTES};
