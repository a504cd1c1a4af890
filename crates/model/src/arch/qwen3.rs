//! Qwen3 (dense) is the Llama decoder with queries and keys RMS-normalized per head, each with
//! its own weight (`attn_q_norm`, `attn_k_norm`, one `head_dim` wide), between the projection
//! and RoPE:
//!
//! ```text
//! q = RoPE(RMSNorm_q(W_q·x))   k = RoPE(RMSNorm_k(W_k·x))   per head
//! ```
//!
//! Unlike Qwen2 it has no Q/K/V biases; RoPE pairs halves (NeoX style), and the heads may be
//! wider than `n_embd / n_head` (`attention.key_length`). The forward pass is Llama's.

use crate::arch::llama::Variant;
use crate::layers::Bias;

pub(crate) const QWEN3: Variant = Variant {
    qkv_bias: Bias::No,
    ffn_bias: Bias::No,
    rope_freq_factors: false,
    requires_experts: false,
    qk_norm: true,
};
