//! One file per architecture. Each loads its weights and writes its forward pass against the
//! backend ops, naming every intermediate as llama.cpp's graph does.

pub(crate) mod gemma2;
pub(crate) mod gemma3;
pub(crate) mod llama;
pub(crate) mod phi3;
pub(crate) mod qwen2;
pub(crate) mod qwen3;
pub(crate) mod qwen3moe;
