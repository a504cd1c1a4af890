//! Phi-3 (and Phi-4 mini): the Llama decoder with fused projections and LongRoPE,
//!
//! ```text
//! h   = x + Attention(RMSNorm(x))        [q; k; v] = W_qkv·n, one fused matrix
//! out = h + W_down(SiLU(g) ⊙ u)           [g; u] = W_up·n, one fused matrix, gate first
//! ```
//!
//! then a final RMSNorm and the projection to the vocabulary. RoPE pairs halves (NeoX style).
//! The long-context models ("LongRoPE", "su" scaling) divide each pair's frequency by a factor
//! of their own, from `rope_factors_long` when the context a sequence may hold exceeds the
//! original one (`rope.scaling.original_context_length`) and from `rope_factors_short`
//! otherwise, as llama.cpp picks them, and scale the rotation by `rope.scaling.attn_factor`.
//! Phi-3's sliding window is ignored, as llama.cpp ignores it. The attention scale is
//! `1/√head_dim`.

use crate::backend::{Activation, Backend};
use crate::hparams::HyperParams;
use crate::layers::{AttentionConfig, GatedFfn, Linear, OutputHead, SelfAttention};
use crate::pass::Pass;
use crate::rope::Rope;
use crate::weights::WeightLoader;
use crate::Result;

pub(crate) struct Phi3<B: Backend> {
    token_embd: B::Weight,
    blocks: Vec<Block<B>>,
    head: OutputHead<B>,
    /// The RoPE of contexts up to the original one, and of longer ones.
    rope_short: Rope,
    rope_long: Rope,
    n_ctx_orig: usize,
    attention_scale: f32,
    rms_eps: f32,
}

struct Block<B: Backend> {
    attn_norm: B::Weight,
    attention: SelfAttention<B>,
    ffn_norm: B::Weight,
    ffn: GatedFfn<B>,
}

impl<B: Backend> Phi3<B> {
    pub fn load(loader: &mut WeightLoader<'_, B>, hp: &HyperParams) -> Result<Self> {
        let mut rope_short = hp.rope.clone();
        let mut rope_long = hp.rope.clone();
        let pairs = [hp.rope.n_rot / 2];
        rope_short.freq_factors = loader
            .optional_host_f32("rope_factors_short.weight", &pairs)?
            .map(Into::into);
        rope_long.freq_factors = loader
            .optional_host_f32("rope_factors_long.weight", &pairs)?
            .map(Into::into);
        let token_embd = loader.embedding("token_embd.weight", &[hp.n_embd, hp.n_vocab])?;
        let blocks = (0..hp.n_layer)
            .map(|il| Block::load(loader, il, hp))
            .collect::<Result<_>>()?;
        Ok(Phi3 {
            token_embd,
            blocks,
            head: OutputHead::load(loader, hp)?,
            rope_short,
            rope_long,
            n_ctx_orig: hp.n_ctx_orig,
            attention_scale: 1.0 / (hp.head_dim_k as f32).sqrt(),
            rms_eps: hp.rms_eps,
        })
    }

    /// The RoPE of a cache whose sequences may hold `n_ctx` positions.
    fn rope(&self, n_ctx: usize) -> &Rope {
        if n_ctx > self.n_ctx_orig {
            &self.rope_long
        } else {
            &self.rope_short
        }
    }

    pub fn forward(&self, pass: &mut Pass<'_, '_, B>) -> Result<B::Tensor> {
        let b = pass.backend;
        let attention = AttentionConfig {
            rope: self.rope(pass.n_ctx),
            scale: self.attention_scale,
            softcap: None,
        };
        let mut x = b.embed(&self.token_embd, pass.state)?;
        pass.observe(&x, "inp_embd", None)?;

        for (il, block) in self.blocks.iter().enumerate() {
            let l = Some(il);
            let normed = b.rms_norm(&x, &block.attn_norm, self.rms_eps)?;
            pass.observe(&normed, "attn_norm", l)?;
            let attn_out = block.attention.forward(pass, &normed, il, &attention)?;
            let (ffn_inp, normed) = b.add_rms_norm(&attn_out, &x, &block.ffn_norm, self.rms_eps)?;
            pass.observe(&ffn_inp, "ffn_inp", l)?;
            pass.observe(&normed, "ffn_norm", l)?;
            let ffn_out = block.ffn.forward(b, &normed)?;
            pass.observe(&ffn_out, "ffn_out", l)?;
            x = b.add(&ffn_out, &ffn_inp)?;
            pass.observe(&x, "l_out", l)?;
        }

        self.head.forward(pass, &x)
    }
}

impl<B: Backend> Block<B> {
    fn load(loader: &mut WeightLoader<'_, B>, il: usize, hp: &HyperParams) -> Result<Self> {
        let blk = format!("blk.{il}");
        let q_width = hp.n_head * hp.head_dim_k;
        let kv_widths = [hp.n_head_kv * hp.head_dim_k, hp.n_head_kv * hp.head_dim_v];
        // Phi-3's files fuse Q, K and V; llama.cpp also takes them apart.
        let qkv = if loader.has(&format!("{blk}.attn_qkv.weight")) {
            let parts = [q_width, kv_widths[0], kv_widths[1]];
            loader
                .split_rows(&format!("{blk}.attn_qkv.weight"), hp.n_embd, parts)?
                .map(Linear::from_weight)
        } else {
            let mut separate = |name: &str, width: usize| {
                loader
                    .tensor(&format!("{blk}.{name}.weight"), &[hp.n_embd, width])
                    .map(Linear::from_weight)
            };
            [
                separate("attn_q", q_width)?,
                separate("attn_k", kv_widths[0])?,
                separate("attn_v", kv_widths[1])?,
            ]
        };
        let [gate, up] =
            loader.split_rows(&format!("{blk}.ffn_up.weight"), hp.n_embd, [hp.n_ff; 2])?;
        let down = loader.tensor(&format!("{blk}.ffn_down.weight"), &[hp.n_ff, hp.n_embd])?;
        Ok(Block {
            attn_norm: loader.tensor(&format!("{blk}.attn_norm.weight"), &[hp.n_embd])?,
            attention: SelfAttention::with_projections(loader, il, hp, qkv)?,
            ffn_norm: loader.tensor(&format!("{blk}.ffn_norm.weight"), &[hp.n_embd])?,
            ffn: GatedFfn::from_parts(
                Linear::from_weight(gate),
                Linear::from_weight(up),
                Linear::from_weight(down),
                Activation::Silu,
            ),
        })
    }
}
