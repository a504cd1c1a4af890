//! The one error type of this crate.

use plumb_gguf::GgmlType;
use thiserror::Error;

/// Why a kernel refused its input. Every message names the tensor type and the lengths involved.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KernelError {
    /// The type has no kernel for this operation (for example: quantizing to an i-quant, which
    /// needs an importance matrix, or dequantizing the integer types, which ggml does not do).
    #[error("{ty} has no {operation} kernel")]
    UnsupportedType {
        ty: GgmlType,
        operation: &'static str,
    },
    /// The element count is not a whole number of blocks.
    #[error("{n_elements} elements is not a whole number of {ty} blocks of {block_size} elements")]
    PartialBlock {
        ty: GgmlType,
        n_elements: usize,
        block_size: usize,
    },
    /// The quantized data does not have the size that the element count implies.
    #[error("{ty} data for {n_elements} elements must be {expected} bytes, got {actual}")]
    ByteLength {
        ty: GgmlType,
        n_elements: usize,
        expected: usize,
        actual: usize,
    },
}
