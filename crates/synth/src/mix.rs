//! Which type each tensor gets: llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp) as
//! it decides for these files — a llama model with an `output.weight` of its own, no
//! importance matrix, no overrides, fewer than 80 layers (so not llama.cpp's "70B" type), and
//! every row a whole number of 256-blocks (so its fallback types never come into play).

use plumb_gguf::GgmlType;

use crate::FileType;

/// The part a tensor plays in the model, as far as the mix cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    TokenEmbd,
    Output,
    /// The RMS-norm weights, 1-D.
    Norm,
    AttnQ,
    AttnK,
    AttnV,
    AttnOutput,
    FfnGate,
    FfnUp,
    FfnDown,
}

/// The type of a tensor of `role` in layer `layer` of `n_layer` (the layer is ignored for
/// tensors outside the blocks).
pub fn tensor_type(file_type: FileType, role: Role, layer: usize, n_layer: usize) -> GgmlType {
    let default = file_type.default_type();
    match role {
        // llama-quantize quantizes only tensors of two or more dimensions.
        Role::Norm => GgmlType::F32,
        // Every rule below is applied only when the default type is a quantized one.
        _ if !default.is_quantized() => default,
        // "new_type != GGML_TYPE_Q8_0 → Q6_K": the output projection keeps more bits, except
        // where the default is already 8 bits.
        Role::Output if default == GgmlType::Q8_0 => GgmlType::Q8_0,
        Role::Output => GgmlType::Q6_K,
        // Only the IQ and ternary mixes change the token embeddings, and tied embeddings
        // would follow the output's type; these files have neither, so it is the default.
        // Q4_K_M gives about half of the attn_v and ffn_down layers Q6_K. For attn_v it counts
        // attn_v tensors, and for ffn_down layers; one of each per layer, in layer order,
        // makes both the layer index. GQA changes nothing for Q4_K_M: llama.cpp looks at
        // n_gqa only for the Q2_K, Q3 and IQ mixes.
        Role::AttnV | Role::FfnDown
            if file_type == FileType::Q4_K_M && use_more_bits(layer, n_layer) =>
        {
            GgmlType::Q6_K
        }
        _ => default,
    }
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers, and every third
/// layer between them.
pub fn use_more_bits(layer: usize, n_layer: usize) -> bool {
    layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2
}
