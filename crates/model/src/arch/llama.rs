//! Llama (Llama 2 and 3, TinyLlama, SmolLM2, Mistral): a stack of pre-norm decoder blocks,
//!
//! ```text
//! h   = x + Attention(RMSNorm(x))          causal, grouped KV heads, RoPE on Q and K
//! out = h + W_down(SiLU(W_gate·n) ⊙ W_up·n)   where n = RMSNorm(h)
//! ```
//!
//! then a final RMSNorm and the projection to the vocabulary. Qwen2 and Qwen3 are the same
//! decoder with other options (see `qwen2.rs`, `qwen3.rs`).
//!
//! Mixtral is a llama whose FFNs are mixtures of experts (`expert_count` in the metadata,
//! `ffn_gate_inp` and `ffn_*_exps` in the file): each token goes to its `expert_used_count`
//! most probable experts by a softmax router, whose outputs are summed by the renormalized
//! probabilities (see `layers/moe.rs`); Qwen3-MoE is qwen3 with them.
//!
//! Llama 3.1 and later slow RoPE's low frequencies down ("llama3" rope scaling): the converter
//! computes the per-pair divisors and stores them as `rope_freqs.weight`, which is all
//! llama.cpp reads of it. Mistral is this architecture too: llama.cpp's llama graph has no
//! sliding window, and Mistral's GGUF files carry none.

use crate::backend::{Activation, Backend};
use crate::hparams::HyperParams;
use crate::layers::{AttentionConfig, Bias, GatedFfn, MoeFfn, OutputHead, SelfAttention};
use crate::pass::Pass;
use crate::rope::Rope;
use crate::weights::WeightLoader;
use crate::{ModelError, Result};

/// The options that tell the Llama-style decoders apart.
pub(crate) struct Variant {
    pub qkv_bias: Bias,
    pub ffn_bias: Bias,
    /// Whether the file may carry `rope_freqs.weight` (Llama 3.1's frequency factors).
    pub rope_freq_factors: bool,
    /// Whether queries and keys are RMS-normalized per head before RoPE (qwen3).
    pub qk_norm: bool,
    /// Whether every FFN is a mixture of experts (qwen3moe); otherwise the FFNs are mixtures
    /// exactly when the file has experts (Mixtral is a llama with `expert_count`).
    pub requires_experts: bool,
}

/// Llama itself: optional biases, as llama.cpp accepts them, and Llama 3.1's RoPE factors.
pub(crate) const LLAMA: Variant = Variant {
    qkv_bias: Bias::Optional,
    ffn_bias: Bias::Optional,
    rope_freq_factors: true,
    qk_norm: false,
    requires_experts: false,
};

pub(crate) struct Llama<B: Backend> {
    token_embd: B::Weight,
    blocks: Vec<Block<B>>,
    head: OutputHead<B>,
    rope: Rope,
    attention_scale: f32,
    rms_eps: f32,
}

struct Block<B: Backend> {
    attn_norm: B::Weight,
    attention: SelfAttention<B>,
    ffn_norm: B::Weight,
    ffn: Ffn<B>,
}

/// A dense gated FFN, or a mixture of experts (`ffn_gate_inp`, `ffn_*_exps`).
enum Ffn<B: Backend> {
    Dense(GatedFfn<B>),
    Experts(MoeFfn<B>),
}

impl<B: Backend> Llama<B> {
    pub fn load(
        loader: &mut WeightLoader<'_, B>,
        hp: &HyperParams,
        variant: &Variant,
    ) -> Result<Self> {
        let mut rope = hp.rope.clone();
        if variant.rope_freq_factors {
            let factors = loader.optional_host_f32("rope_freqs.weight", &[rope.n_rot / 2])?;
            rope.freq_factors = factors.map(Into::into);
        }
        if variant.requires_experts && hp.n_expert == 0 {
            return Err(ModelError::HyperParam {
                key: format!("{}.expert_count", hp.architecture.name()),
                reason: "a mixture-of-experts architecture needs experts".to_owned(),
            });
        }
        let token_embd = loader.embedding("token_embd.weight", &[hp.n_embd, hp.n_vocab])?;
        let blocks = (0..hp.n_layer)
            .map(|il| {
                Ok(Block {
                    attn_norm: loader
                        .tensor(&format!("blk.{il}.attn_norm.weight"), &[hp.n_embd])?,
                    attention: SelfAttention::load(
                        loader,
                        il,
                        hp,
                        variant.qkv_bias,
                        variant.qk_norm,
                    )?,
                    ffn_norm: loader.tensor(&format!("blk.{il}.ffn_norm.weight"), &[hp.n_embd])?,
                    ffn: if hp.n_expert > 0 {
                        Ffn::Experts(MoeFfn::load(loader, il, hp)?)
                    } else {
                        Ffn::Dense(GatedFfn::load(
                            loader,
                            il,
                            hp,
                            Activation::Silu,
                            variant.ffn_bias,
                        )?)
                    },
                })
            })
            .collect::<Result<_>>()?;
        Ok(Llama {
            token_embd,
            blocks,
            head: OutputHead::load(loader, hp)?,
            rope,
            attention_scale: 1.0 / (hp.head_dim_k as f32).sqrt(),
            rms_eps: hp.rms_eps,
        })
    }

    pub fn forward(&self, pass: &mut Pass<'_, '_, B>) -> Result<B::Tensor> {
        let b = pass.backend;
        let attention = AttentionConfig {
            rope: &self.rope,
            scale: self.attention_scale,
            softcap: None,
        };
        let mut x = b.embed(&self.token_embd, pass.state)?;
        pass.observe(&x, "inp_embd", None)?;
        let Some(first) = self.blocks.first() else {
            return self.head.forward(pass, &x);
        };
        let mut normed = b.rms_norm(&x, &first.attn_norm, self.rms_eps)?;

        for (il, block) in self.blocks.iter().enumerate() {
            let l = Some(il);
            pass.observe(&normed, "attn_norm", l)?;
            let attn_out = block.attention.forward(pass, &normed, il, &attention)?;
            let (ffn_inp, ffn_normed) =
                b.add_rms_norm(&attn_out, &x, &block.ffn_norm, self.rms_eps)?;
            pass.observe(&ffn_inp, "ffn_inp", l)?;
            pass.observe(&ffn_normed, "ffn_norm", l)?;
            let ffn_out = match &block.ffn {
                Ffn::Dense(ffn) => ffn.forward(b, &ffn_normed)?,
                Ffn::Experts(moe) => moe.forward(b, &ffn_normed)?,
            };
            pass.observe(&ffn_out, "ffn_out", l)?;
            // The residual sum and the next layer's attention norm in one composite op: one
            // launch fewer a layer where a backend fuses them.
            x = match self.blocks.get(il + 1) {
                Some(next) => {
                    let (sum, next_normed) =
                        b.add_rms_norm(&ffn_out, &ffn_inp, &next.attn_norm, self.rms_eps)?;
                    normed = next_normed;
                    sum
                }
                None => b.add(&ffn_out, &ffn_inp)?,
            };
            pass.observe(&x, "l_out", l)?;
        }

        self.head.forward(pass, &x)
    }
}
