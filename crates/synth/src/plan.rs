//! The tensors of a synthetic file, in the order they are written: names as llama.cpp's
//! llama architecture has them, shapes in ggml order (row length first), types from the mix.

use plumb_gguf::TensorSpec;

use crate::{tensor_type, FileType, Role, Shape};

/// One tensor to write, and the part it plays (which decides its values).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedTensor {
    pub spec: TensorSpec,
    pub role: Role,
}

/// Every tensor of a `shape` model of `file_type`: the embeddings, each block, the final norm
/// and the output projection.
pub fn plan(shape: &Shape, file_type: FileType) -> Vec<PlannedTensor> {
    let (embd, kv, ff, vocab) = (shape.n_embd, shape.n_embd_kv(), shape.n_ff, shape.n_vocab);
    let mut tensors = Vec::with_capacity(9 * shape.n_layer + 3);
    let mut add = |name: String, role: Role, layer: usize, dims: &[usize]| {
        tensors.push(PlannedTensor {
            spec: TensorSpec {
                name,
                ggml_type: tensor_type(file_type, role, layer, shape.n_layer),
                shape: dims.iter().map(|&d| d as u64).collect(),
            },
            role,
        });
    };
    add(
        "token_embd.weight".into(),
        Role::TokenEmbd,
        0,
        &[embd, vocab],
    );
    for il in 0..shape.n_layer {
        let name = |n: &str| format!("blk.{il}.{n}.weight");
        add(name("attn_norm"), Role::Norm, il, &[embd]);
        add(name("attn_q"), Role::AttnQ, il, &[embd, embd]);
        add(name("attn_k"), Role::AttnK, il, &[embd, kv]);
        add(name("attn_v"), Role::AttnV, il, &[embd, kv]);
        add(name("attn_output"), Role::AttnOutput, il, &[embd, embd]);
        add(name("ffn_norm"), Role::Norm, il, &[embd]);
        add(name("ffn_gate"), Role::FfnGate, il, &[embd, ff]);
        add(name("ffn_up"), Role::FfnUp, il, &[embd, ff]);
        add(name("ffn_down"), Role::FfnDown, il, &[ff, embd]);
    }
    add("output_norm.weight".into(), Role::Norm, 0, &[embd]);
    add("output.weight".into(), Role::Output, 0, &[embd, vocab]);
    tensors
}

impl PlannedTensor {
    /// The size of the tensor's data in the file.
    pub fn data_bytes(&self) -> u64 {
        let ty = self.spec.ggml_type;
        let n_values: u64 = self.spec.shape.iter().product();
        n_values / ty.block_size() as u64 * ty.block_bytes() as u64
    }
}
