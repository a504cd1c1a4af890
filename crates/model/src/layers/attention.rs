use crate::backend::{AttentionStep, Backend};
use crate::hparams::HyperParams;
use crate::layers::{Bias, Linear};
use crate::pass::Pass;
use crate::rope::Rope;
use crate::weights::WeightLoader;
use crate::Result;

/// What may differ between the attention layers of one model.
pub(crate) struct AttentionConfig<'r> {
    pub rope: &'r Rope,
    /// The factor on `q·k` before the softmax, usually `1/√head_dim`.
    pub scale: f32,
    /// Soft-capping of the scaled scores (gemma2), else `None`.
    pub softcap: Option<f32>,
}

/// Multi-head self-attention with grouped KV heads: project, optionally normalize Q and K per
/// head, rotate them by position, attend over the cache, project back.
pub(crate) struct SelfAttention<B: Backend> {
    q: Linear<B>,
    k: Linear<B>,
    v: Linear<B>,
    output: Linear<B>,
    /// Per-head RMSNorm of queries and keys (qwen3, gemma3).
    qk_norm: Option<(B::Weight, B::Weight)>,
    n_head: usize,
    head_dim_k: usize,
    head_dim_v: usize,
    rms_eps: f32,
}

impl<B: Backend> SelfAttention<B> {
    pub fn load(
        loader: &mut WeightLoader<'_, B>,
        il: usize,
        hp: &HyperParams,
        qkv_bias: Bias,
        qk_norm: bool,
    ) -> Result<Self> {
        let blk = format!("blk.{il}");
        let q_width = hp.n_head * hp.head_dim_k;
        let k_width = hp.n_head_kv * hp.head_dim_k;
        let v_width = hp.n_head_kv * hp.head_dim_v;
        let qk_norm = if qk_norm {
            Some((
                loader.tensor(&format!("{blk}.attn_q_norm.weight"), &[hp.head_dim_k])?,
                loader.tensor(&format!("{blk}.attn_k_norm.weight"), &[hp.head_dim_k])?,
            ))
        } else {
            None
        };
        let q = Linear::load(
            loader,
            &format!("{blk}.attn_q"),
            hp.n_embd,
            q_width,
            qkv_bias,
        )?;
        let k = Linear::load(
            loader,
            &format!("{blk}.attn_k"),
            hp.n_embd,
            k_width,
            qkv_bias,
        )?;
        let v = Linear::load(
            loader,
            &format!("{blk}.attn_v"),
            hp.n_embd,
            v_width,
            qkv_bias,
        )?;
        let mut attention = Self::with_projections(loader, il, hp, [q, k, v])?;
        attention.qk_norm = qk_norm;
        Ok(attention)
    }

    /// Attention whose Q, K and V projections are already loaded (phi3 splits them from one
    /// fused tensor), with the layer's `attn_output` and no Q/K norms.
    pub fn with_projections(
        loader: &mut WeightLoader<'_, B>,
        il: usize,
        hp: &HyperParams,
        [q, k, v]: [Linear<B>; 3],
    ) -> Result<Self> {
        let out_in = hp.n_head * hp.head_dim_v;
        Ok(SelfAttention {
            q,
            k,
            v,
            output: Linear::load(
                loader,
                &format!("blk.{il}.attn_output"),
                out_in,
                hp.n_embd,
                Bias::Optional,
            )?,
            qk_norm: None,
            n_head: hp.n_head,
            head_dim_k: hp.head_dim_k,
            head_dim_v: hp.head_dim_v,
            rms_eps: hp.rms_eps,
        })
    }

    /// Attention of layer `il` for the normalized input `x`; returns `attn_out`, the output
    /// projection of the attended values.
    pub fn forward(
        &self,
        pass: &mut Pass<'_, '_, B>,
        x: &B::Tensor,
        il: usize,
        config: &AttentionConfig<'_>,
    ) -> Result<B::Tensor> {
        let b = pass.backend;
        let [mut q, mut k, v] = b.qkv(
            x,
            self.q.projection(),
            self.k.projection(),
            self.v.projection(),
        )?;

        if let Some((q_norm, k_norm)) = &self.qk_norm {
            q = b.rms_norm(&q, q_norm, self.rms_eps)?;
            pass.observe_heads(&q, "Qcur_normed", il, self.head_dim_k)?;
            k = b.rms_norm(&k, k_norm, self.rms_eps)?;
            pass.observe_heads(&k, "Kcur_normed", il, self.head_dim_k)?;
        }

        let (q, k) = b.rope_store_kv(
            q,
            k,
            &v,
            pass.kv,
            il,
            self.head_dim_k,
            config.rope,
            pass.state,
        )?;
        pass.observe_heads(&q, "Qcur", il, self.head_dim_k)?;
        pass.observe_heads(&k, "Kcur", il, self.head_dim_k)?;
        pass.observe_heads(&v, "Vcur", il, self.head_dim_v)?;

        let step = AttentionStep {
            layer: il,
            n_head: self.n_head,
            scale: config.scale,
            softcap: config.softcap,
        };
        let attended = b.attention(&q, pass.kv, &step, pass.state)?;
        pass.observe(&attended, "kqv_out", Some(il))?;

        let out = self.output.forward(b, &attended)?;
        pass.observe(&out, "attn_out", Some(il))?;
        Ok(out)
    }
}
