//! Qwen3-MoE is Qwen3 (per-head Q/K RMSNorm, NeoX RoPE, no biases) whose every FFN is a
//! mixture of experts: a softmax router picks each token's `expert_used_count` most probable
//! of `expert_count` gated SiLU experts of width `expert_feed_forward_length`, whose outputs
//! are summed by their renormalized probabilities. The forward pass is Llama's.

use crate::arch::llama::Variant;
use crate::layers::Bias;

pub(crate) const QWEN3MOE: Variant = Variant {
    qkv_bias: Bias::No,
    ffn_bias: Bias::No,
    rope_freq_factors: false,
    requires_experts: true,
    qk_norm: true,
};
