use plumb_ggml::KernelError;
use plumb_gguf::GgufError;

use crate::{FileType, ARCH_MODELS, SHAPES};

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("unknown shape {0:?}; the shapes are {names}", names = shape_names())]
    UnknownShape(String),
    #[error("unknown type {0:?}; the types are {names}", names = file_type_names())]
    UnknownFileType(String),
    #[error("unknown architecture model {0:?}; the models are {names}", names = arch_model_names())]
    UnknownArchModel(String),
    #[error("the tokenizer's source file has no tokenizer.ggml.tokens array")]
    NoTokenizer,
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

fn arch_model_names() -> String {
    ARCH_MODELS.map(|m| m.name).join(", ")
}
