use std::path::PathBuf;

use plumb_gguf::{GgmlType, GgufError};

/// Everything that can go wrong loading or running a model. Each variant names the file, key,
/// tensor, sequence or backend operation at fault.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The file cannot be opened or is not a valid GGUF file. The message includes the cause
    /// (it is not also chained as a source, so that error reports do not repeat it).
    #[error("{}: {error}", path.display())]
    Open { path: PathBuf, error: GgufError },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unknown architecture {0:?}: plumb runs llama, qwen2, qwen3, qwen3moe, gemma2, gemma3 and phi3")]
    UnknownArchitecture(String),
    #[error("metadata key {key:?}: {reason}")]
    HyperParam { key: String, reason: String },
    #[error("tensor {tensor:?} has shape {found:?}, but the metadata implies {expected:?}")]
    TensorShape {
        tensor: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor {tensor:?} is {found}, expected {expected}")]
    TensorType {
        tensor: String,
        expected: &'static str,
        found: GgmlType,
    },
    #[error(
        "the file has tensors the {architecture} architecture does not use: {}",
        tensors.join(", ")
    )]
    UnusedTensors {
        architecture: &'static str,
        tensors: Vec<String>,
    },
    #[error("bad batch: {0}")]
    Batch(String),
    #[error(
        "sequence {seq} is full: it holds {len} of {n_ctx} positions and {requested} more were \
         requested; start a new sequence or create the cache with a larger context"
    )]
    ContextFull {
        seq: usize,
        len: usize,
        n_ctx: usize,
        requested: usize,
    },
    #[error("cannot cut sequence {seq} back to {len} positions: {reason}")]
    Truncate {
        seq: usize,
        len: usize,
        reason: String,
    },
    #[error(
        "the KV cache's block pool for {pool} is exhausted: {needed} more blocks were needed, \
         {free} of {total} are free; finish or clear sequences, or create the cache with more \
         blocks"
    )]
    KvPoolExhausted {
        pool: String,
        needed: usize,
        free: usize,
        total: usize,
    },
    #[error("cannot fork sequence {src} into sequence {dst}: {reason}")]
    Fork {
        src: usize,
        dst: usize,
        reason: String,
    },
    #[error("{backend} backend, {op}: {message}")]
    Backend {
        backend: &'static str,
        op: &'static str,
        message: String,
    },
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
