//! The GGUF container format: a validating, zero-copy reader over a memory map (or, on
//! WebAssembly, one owned buffer), and writers:
//! [`GgufWriter`] for files built in memory, [`GgufStreamWriter`] for files larger than memory,
//! written tensor by tensor.
//!
//! The format is specified in ggml's `docs/gguf.md`. Versions 2 and 3 are read (they differ
//! from version 1 in using 64-bit counts); version 3 is written.

mod error;
mod ggml_type;
mod metadata;
mod reader;
mod stream_writer;
mod value;
mod writer;

pub use error::{GgufError, Result};
pub use ggml_type::{GgmlType, QK_K};
pub use metadata::{Metadata, ALIGNMENT_KEY, ARCHITECTURE_KEY, DEFAULT_ALIGNMENT};
pub use reader::{GgufFile, GgufHeader, TensorInfo, MAGIC, MAX_DIMS};
pub use stream_writer::{GgufStreamWriter, TensorSpec};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
