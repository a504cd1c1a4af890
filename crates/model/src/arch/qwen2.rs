//! Qwen2 (Qwen2, Qwen2.5, Qwen2.5-Coder) is the Llama decoder with two differences: the Q, K
//! and V projections always carry biases, and RoPE pairs dimension `i` with `i + d/2` (NeoX
//! style, which the hyperparameters select for this architecture). The forward pass is
//! Llama's, so it is not repeated here.

use crate::arch::llama::Variant;
use crate::layers::Bias;

pub(crate) const QWEN2: Variant = Variant {
    qkv_bias: Bias::Required,
    ffn_bias: Bias::No,
    rope_freq_factors: false,
    requires_experts: false,
    qk_norm: false,
};
