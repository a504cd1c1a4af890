//! Gemma 2: pre- and post-normed decoder blocks, local and global attention in turn, and
//! soft-capped attention scores and logits,
//!
//! ```text
//! x₀  = √n_embd · Embed(tokens)
//! h   = x + RMSNorm_post(Attention(RMSNorm(x)))
//! out = h + RMSNorm_post(W_down(GELU(W_gate·n) ⊙ W_up·n))   where n = RMSNorm(h)
//! ```
//!
//! then a final RMSNorm, the projection to the vocabulary (tied to the embedding table), and
//! `logits = c_f·tanh(logits/c_f)`. Inside attention the scaled scores are capped the same way,
//! `c_a·tanh(score/c_a)`, before the softmax. Even layers (0, 2, 4, ...) are local: they see
//! only the last `attention.sliding_window` positions; odd layers are global. Every layer
//! uses the same RoPE (NeoX pairing). The attention scale is `1/√head_dim`, except for the
//! 27B model (46 layers), whose `query_pre_attn_scalar` is `n_embd/n_head`, as llama.cpp
//! decides it. The converter has already added Gemma's `1 +` to every norm weight.

use crate::backend::{Activation, Backend};
use crate::hparams::HyperParams;
use crate::layers::{AttentionConfig, Bias, GatedFfn, OutputHead, SelfAttention};
use crate::pass::Pass;
use crate::rope::Rope;
use crate::weights::WeightLoader;
use crate::{ModelError, Result};

/// One layer in this many is global; the others are local (llama.cpp's swa pattern 2).
const GLOBAL_EVERY: usize = 2;
/// The layer count of Gemma 2 27B, whose queries are scaled by `1/√(n_embd/n_head)`.
const LAYERS_OF_27B: usize = 46;

pub(crate) struct Gemma2<B: Backend> {
    token_embd: B::Weight,
    blocks: Vec<Block<B>>,
    head: OutputHead<B>,
    rope: Rope,
    sliding_window: usize,
    embd_scale: f32,
    attention_scale: f32,
    attn_softcap: f32,
    rms_eps: f32,
}

struct Block<B: Backend> {
    attn_norm: B::Weight,
    attention: SelfAttention<B>,
    post_attention_norm: B::Weight,
    ffn_norm: B::Weight,
    ffn: GatedFfn<B>,
    post_ffw_norm: B::Weight,
}

impl<B: Backend> Gemma2<B> {
    pub fn load(loader: &mut WeightLoader<'_, B>, hp: &HyperParams) -> Result<Self> {
        let missing = |key: &str| ModelError::HyperParam {
            key: format!("gemma2.{key}"),
            reason: "gemma2 needs it".to_owned(),
        };
        let sliding_window = hp
            .sliding_window
            .ok_or_else(|| missing("attention.sliding_window"))?;
        let attn_softcap = hp
            .attn_softcap
            .ok_or_else(|| missing("attn_logit_softcapping"))?;
        let norm = |loader: &mut WeightLoader<'_, B>, il: usize, name: &str| {
            loader.tensor(&format!("blk.{il}.{name}.weight"), &[hp.n_embd])
        };
        let blocks = (0..hp.n_layer)
            .map(|il| {
                Ok(Block {
                    attn_norm: norm(loader, il, "attn_norm")?,
                    attention: SelfAttention::load(loader, il, hp, Bias::No, false)?,
                    post_attention_norm: norm(loader, il, "post_attention_norm")?,
                    ffn_norm: norm(loader, il, "ffn_norm")?,
                    ffn: GatedFfn::load(loader, il, hp, Activation::GeluTanh, Bias::No)?,
                    post_ffw_norm: norm(loader, il, "post_ffw_norm")?,
                })
            })
            .collect::<Result<_>>()?;
        let query_scale_dim = if hp.n_layer == LAYERS_OF_27B {
            hp.n_embd / hp.n_head
        } else {
            hp.head_dim_k
        };
        Ok(Gemma2 {
            token_embd: loader.embedding("token_embd.weight", &[hp.n_embd, hp.n_vocab])?,
            blocks,
            head: OutputHead::load(loader, hp)?,
            rope: hp.rope.clone(),
            sliding_window,
            embd_scale: (hp.n_embd as f32).sqrt(),
            attention_scale: 1.0 / (query_scale_dim as f32).sqrt(),
            attn_softcap,
            rms_eps: hp.rms_eps,
        })
    }

    fn is_local(il: usize) -> bool {
        il % GLOBAL_EVERY != GLOBAL_EVERY - 1
    }

    /// The sliding window of layer `il`, `None` for a global layer.
    pub fn layer_window(&self, il: usize) -> Option<usize> {
        Self::is_local(il).then_some(self.sliding_window)
    }

    pub fn forward(&self, pass: &mut Pass<'_, '_, B>) -> Result<B::Tensor> {
        let b = pass.backend;
        let attention = AttentionConfig {
            rope: &self.rope,
            scale: self.attention_scale,
            softcap: Some(self.attn_softcap),
        };
        let x = b.embed(&self.token_embd, pass.state)?;
        let mut x = b.scale(x, self.embd_scale)?;
        pass.observe(&x, "inp_scaled", None)?;

        for (il, block) in self.blocks.iter().enumerate() {
            let l = Some(il);
            let normed = b.rms_norm(&x, &block.attn_norm, self.rms_eps)?;
            pass.observe(&normed, "attn_norm", l)?;
            let attn_out = block.attention.forward(pass, &normed, il, &attention)?;
            let attn_out = b.rms_norm(&attn_out, &block.post_attention_norm, self.rms_eps)?;
            pass.observe(&attn_out, "attn_post_norm", l)?;
            let (sa_out, normed) = b.add_rms_norm(&attn_out, &x, &block.ffn_norm, self.rms_eps)?;
            pass.observe(&sa_out, "sa_out", l)?;
            pass.observe(&normed, "ffn_norm", l)?;
            let ffn_out = block.ffn.forward(b, &normed)?;
            pass.observe(&ffn_out, "ffn_out", l)?;
            let ffn_out = b.rms_norm(&ffn_out, &block.post_ffw_norm, self.rms_eps)?;
            pass.observe(&ffn_out, "ffn_post_norm", l)?;
            x = b.add(&ffn_out, &sa_out)?;
            pass.observe(&x, "l_out", l)?;
        }

        // The head caps the logits by `final_logit_softcapping`.
        self.head.forward(pass, &x)
    }
}
