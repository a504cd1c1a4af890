use plumb_ggml::KernelError;
use plumb_gguf::GgufError;

use crate::{FileType, SHAPES};

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("unknown shape {0:?}; the shapes are {names}", names = shape_names())]
    UnknownShape(String),
    #[error("unknown type {0:?}; the types are {names}", names = file_type_names())]
    UnknownFileType(String),
    #[error("{shape} has {max} layers, so it cannot keep {requested}: give 1 to {max}")]
    LayerCount {
        shape: &'static str,
        requested: usize,
        max: usize,
    },
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("quantizing: {0}")]
    Quantize(#[from] KernelError),
}

fn shape_names() -> String {
    SHAPES.map(|s| s.name).join(", ")
}

fn file_type_names() -> String {
    FileType::ALL.map(|t| t.name()).join(", ")
}
