//! Gemma 3 (text): pre- and post-normed decoder blocks with local and global attention,
//!
//! ```text
//! x₀  = √n_embd · Embed(tokens)
//! h   = x + RMSNorm_post(Attention(RMSNorm(x)))        Q and K RMS-normalized per head
//! out = h + RMSNorm_post(W_down(GELU(W_gate·n) ⊙ W_up·n))   where n = RMSNorm(h)
//! ```
//!
//! then a final RMSNorm and the projection to the vocabulary (tied to the embedding table).
//! Five of every six layers are local: they see only the last `attention.sliding_window`
//! positions and rotate with RoPE base 10000. Every sixth layer (5, 11, 17, ...) is global and
//! uses the metadata's RoPE base and scaling. GELU is the tanh approximation; the attention
//! scale is `1/√head_dim`. The converter has already added Gemma's `1 +` to every norm weight,
//! so the weights are used as stored.

use crate::backend::{Activation, Backend};
use crate::hparams::HyperParams;
use crate::layers::{AttentionConfig, Bias, GatedFfn, OutputHead, SelfAttention};
use crate::pass::Pass;
use crate::rope::Rope;
use crate::weights::WeightLoader;
use crate::{ModelError, Result};

/// One layer in this many is global; the others are local (llama.cpp's swa pattern 6).
const GLOBAL_EVERY: usize = 6;
/// The RoPE base of the local layers, fixed by the architecture rather than the metadata.
const LOCAL_ROPE_BASE: f32 = 10000.0;

pub(crate) struct Gemma3<B: Backend> {
    token_embd: B::Weight,
    blocks: Vec<Block<B>>,
    head: OutputHead<B>,
    global_rope: Rope,
    local_rope: Rope,
    sliding_window: usize,
    embd_scale: f32,
    attention_scale: f32,
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

impl<B: Backend> Gemma3<B> {
    pub fn load(loader: &mut WeightLoader<'_, B>, hp: &HyperParams) -> Result<Self> {
        let sliding_window = hp.sliding_window.ok_or_else(|| ModelError::HyperParam {
            key: "gemma3.attention.sliding_window".to_owned(),
            reason: "gemma3 needs a sliding window".to_owned(),
        })?;
        let norm = |loader: &mut WeightLoader<'_, B>, il: usize, name: &str| {
            loader.tensor(&format!("blk.{il}.{name}.weight"), &[hp.n_embd])
        };
        let blocks = (0..hp.n_layer)
            .map(|il| {
                Ok(Block {
                    attn_norm: norm(loader, il, "attn_norm")?,
                    attention: SelfAttention::load(loader, il, hp, Bias::No, true)?,
                    post_attention_norm: norm(loader, il, "post_attention_norm")?,
                    ffn_norm: norm(loader, il, "ffn_norm")?,
                    ffn: GatedFfn::load(loader, il, hp, Activation::GeluTanh, Bias::No)?,
                    post_ffw_norm: norm(loader, il, "post_ffw_norm")?,
                })
            })
            .collect::<Result<_>>()?;
        let local_rope = Rope {
            freq_base: LOCAL_ROPE_BASE,
            freq_scale: 1.0,
            ..hp.rope.clone()
        };
        // Gemma 3 27B scales queries by 1/√(n_embd/n_head) instead (its query_pre_attn_scalar);
        // llama.cpp recognizes it by its 62 layers.
        let query_scale_dim = if hp.n_layer == 62 {
            hp.n_embd / hp.n_head
        } else {
            hp.head_dim_k
        };
        Ok(Gemma3 {
            token_embd: loader.embedding("token_embd.weight", &[hp.n_embd, hp.n_vocab])?,
            blocks,
            head: OutputHead::load(loader, hp)?,
            global_rope: hp.rope.clone(),
            local_rope,
            sliding_window,
            embd_scale: (hp.n_embd as f32).sqrt(),
            attention_scale: 1.0 / (query_scale_dim as f32).sqrt(),
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
        let local = AttentionConfig {
            rope: &self.local_rope,
            scale: self.attention_scale,
            softcap: None,
        };
        let global = AttentionConfig {
            rope: &self.global_rope,
            scale: self.attention_scale,
            softcap: None,
        };
        let x = b.embed(&self.token_embd, pass.state)?;
        let mut x = b.scale(x, self.embd_scale)?;
        pass.observe(&x, "inp_embd", None)?;

        for (il, block) in self.blocks.iter().enumerate() {
            let l = Some(il);
            let attention = if Self::is_local(il) { &local } else { &global };
            let normed = b.rms_norm(&x, &block.attn_norm, self.rms_eps)?;
            pass.observe(&normed, "attn_norm", l)?;
            let attn_out = block.attention.forward(pass, &normed, il, attention)?;
            let attn_out = b.rms_norm(&attn_out, &block.post_attention_norm, self.rms_eps)?;
            pass.observe(&attn_out, "attn_post_norm", l)?;
            let (ffn_inp, normed) = b.add_rms_norm(&attn_out, &x, &block.ffn_norm, self.rms_eps)?;
            pass.observe(&ffn_inp, "ffn_inp", l)?;
            pass.observe(&normed, "ffn_norm", l)?;
            let ffn_out = block.ffn.forward(b, &normed)?;
            pass.observe(&ffn_out, "ffn_out", l)?;
            let ffn_out = b.rms_norm(&ffn_out, &block.post_ffw_norm, self.rms_eps)?;
            pass.observe(&ffn_out, "ffn_post_norm", l)?;
            x = b.add(&ffn_out, &ffn_inp)?;
            pass.observe(&x, "l_out", l)?;
        }

        self.head.forward(pass, &x)
    }
}
