use std::path::PathBuf;

use crate::GgmlType;

/// Everything that can be wrong with a GGUF file or with a question asked of one. Each variant
/// names the key, tensor or byte offset at fault.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error("big-endian GGUF files are not supported")]
    BigEndian,
    #[error("unsupported GGUF version {0} (plumb reads versions 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("file is truncated: {what} at byte {offset} needs {needed} bytes, {available} remain")]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        available: u64,
    },
    #[error(
        "{what} claims {count} entries, more than the {available} bytes left in the file can hold"
    )]
    CountTooLarge {
        what: String,
        count: u64,
        available: u64,
    },
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 { what: String },
    #[error("metadata key {key:?} has unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("metadata key {0:?} appears twice")]
    DuplicateKey(String),
    #[error("general.alignment = {0} is not a power of two")]
    BadAlignment(u64),
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    #[error("tensor {tensor:?} has unknown ggml type id {type_id}")]
    UnknownTensorType { tensor: String, type_id: u32 },
    #[error("tensor {tensor:?} has {n_dims} dimensions; ggml allows 1 to 4")]
    BadDimCount { tensor: String, n_dims: u32 },
    #[error("tensor {tensor:?} has shape {shape:?}: {reason}")]
    BadShape {
        tensor: String,
        shape: Vec<u64>,
        reason: String,
    },
    #[error(
        "tensor {tensor:?} data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error(
        "tensor {tensor:?} needs bytes {offset}..{end} of the data section, which has \
         {data_len} bytes: the file is truncated or damaged"
    )]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        end: u64,
        data_len: u64,
    },
    #[error("tensors {first:?} and {second:?} overlap in the data section")]
    OverlappingTensors { first: String, second: String },
    #[error("missing metadata key {0:?}")]
    MissingKey(String),
    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("metadata key {key:?} = {value} does not fit in {expected}")]
    OutOfRange {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("more tensor data was written than the {n_tensors} declared tensors hold")]
    DataOverrun { n_tensors: usize },
    #[error("tensor {tensor:?} got {written} of its {size} bytes before the file was finished")]
    DataIncomplete {
        tensor: String,
        written: u64,
        size: u64,
    },
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    #[error("tensor {tensor:?} is {found}, expected {expected}")]
    WrongTensorType {
        tensor: String,
        expected: GgmlType,
        found: GgmlType,
    },
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
