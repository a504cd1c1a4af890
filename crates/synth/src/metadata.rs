//! The metadata of a synthetic file: the keys llama.cpp and plumb read for a llama model.

use plumb_gguf::Metadata;

use crate::vocab::add_vocabulary;
use crate::{FileType, Shape};

/// ggml's `GGML_QNT_VERSION`, which llama-quantize writes into every file.
const QUANTIZATION_VERSION: u32 = 2;

pub fn metadata(shape: &Shape, file_type: FileType) -> Metadata {
    let u32_of = |n: usize| n as u32;
    let mut md = Metadata::new();
    md.set("general.architecture", "llama");
    md.set(
        "general.name",
        format!(
            "synthetic {} ({} layers, random weights)",
            shape.name, shape.n_layer
        ),
    );
    md.set("general.file_type", file_type.llama_ftype());
    md.set("general.quantization_version", QUANTIZATION_VERSION);
    md.set("llama.vocab_size", u32_of(shape.n_vocab));
    md.set("llama.context_length", u32_of(shape.n_ctx));
    md.set("llama.embedding_length", u32_of(shape.n_embd));
    md.set("llama.block_count", u32_of(shape.n_layer));
    md.set("llama.feed_forward_length", u32_of(shape.n_ff));
    md.set("llama.rope.dimension_count", u32_of(shape.head_dim()));
    md.set("llama.rope.freq_base", shape.rope_freq_base);
    md.set("llama.attention.head_count", u32_of(shape.n_head));
    md.set("llama.attention.head_count_kv", u32_of(shape.n_head_kv));
    md.set("llama.attention.layer_norm_rms_epsilon", shape.rms_eps);
    add_vocabulary(&mut md, shape.n_vocab);
    md
}
