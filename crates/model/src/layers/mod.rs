//! The pieces every architecture shares: linear projections, self-attention over the KV
//! cache, the gated feed-forward network and its mixture of experts, and the output head.

mod attention;
mod ffn;
mod linear;
mod moe;
mod output;

pub(crate) use attention::{AttentionConfig, SelfAttention};
pub(crate) use ffn::GatedFfn;
pub(crate) use linear::{Bias, Linear};
pub(crate) use moe::MoeFfn;
pub(crate) use output::OutputHead;
