//! Random-weight GGUF models of real shapes (`plumb synth`), for benchmarks where the real
//! files cannot be copied in: the file is made where it is needed, in seconds to minutes, and
//! llama.cpp reads it as well as plumb does.
//!
//! - [`Shape`]: the hyperparameters of TinyLlama 1.1B, Llama 2 7B and Llama 3 8B (and a tiny
//!   shape for tests); [`Shape::with_layers`] keeps only the first layers.
//! - [`FileType`] and [`tensor_type`]: llama.cpp's file types and its per-tensor mix (Q4_K_M
//!   gives the output and about half of the attn_v and ffn_down layers Q6_K).
//! - [`plan`]: every tensor, its name, shape and type; [`metadata`]: the llama keys and a
//!   made-up SentencePiece vocabulary with llama's special and byte tokens.
//! - [`write_model`]: seeded weights made and quantized by plumb's reference quantizers on
//!   all threads, streamed to disk tensor by tensor.
//! - [`write_arch_model`]: tiny F32 models of each architecture plumb runs ([`ARCH_MODELS`]),
//!   with a real model's tokenizer, to check plumb against llama.cpp.

mod arch_models;
mod error;
mod file_type;
mod metadata;
mod mix;
mod plan;
mod shape;
mod vocab;
mod weights;
mod write;

pub use arch_models::{
    write_arch_model, ArchModel, Experts, Options as ArchOptions, RopeScaling, ARCH_MODELS,
};
pub use error::SynthError;
pub use file_type::FileType;
pub use metadata::metadata;
pub use mix::{tensor_type, use_more_bits, Role};
pub use plan::{plan, PlannedTensor};
pub use shape::{Shape, LLAMA2_7B, LLAMA3_8B, SHAPES, TINY, TINYLLAMA_1_1B};
pub use write::{write_model, Options};
