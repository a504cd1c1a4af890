//! Hyperparameters from GGUF metadata, with llama.cpp's defaults where a key may be missing.

use plumb_gguf::{GgufFile, Metadata};

use crate::rope::{Rope, RopeStyle, Yarn};
use crate::{ModelError, Result};

/// The architectures plumb can run, by their `general.architecture` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// Llama 2/3, TinyLlama, SmolLM2, Mistral.
    Llama,
    Qwen2,
    Qwen3,
    Gemma2,
    Gemma3,
    Phi3,
    Qwen3Moe,
}

impl Architecture {
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::Llama),
            "qwen2" => Some(Self::Qwen2),
            "qwen3" => Some(Self::Qwen3),
            "gemma2" => Some(Self::Gemma2),
            "gemma3" => Some(Self::Gemma3),
            "phi3" => Some(Self::Phi3),
            "qwen3moe" => Some(Self::Qwen3Moe),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Qwen2 => "qwen2",
            Self::Qwen3 => "qwen3",
            Self::Gemma2 => "gemma2",
            Self::Gemma3 => "gemma3",
            Self::Phi3 => "phi3",
            Self::Qwen3Moe => "qwen3moe",
        }
    }

    /// The RoPE pairing llama.cpp uses for this architecture.
    pub fn rope_style(self) -> RopeStyle {
        match self {
            Self::Llama => RopeStyle::Normal,
            Self::Qwen2
            | Self::Qwen3
            | Self::Qwen3Moe
            | Self::Gemma2
            | Self::Gemma3
            | Self::Phi3 => RopeStyle::Neox,
        }
    }
}

/// The shape and constants of a model, as the metadata states them.
#[derive(Debug, Clone, PartialEq)]
pub struct HyperParams {
    pub architecture: Architecture,
    pub n_vocab: usize,
    /// `context_length`: the context the model was trained with.
    pub n_ctx_train: usize,
    /// `rope.scaling.original_context_length`, else `n_ctx_train`: the context before RoPE
    /// scaling stretched it (YaRN's corrections; phi3's choice of RoPE factors).
    pub n_ctx_orig: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// `attention.key_length`: the width of one query/key head.
    pub head_dim_k: usize,
    /// `attention.value_length`: the width of one value head.
    pub head_dim_v: usize,
    pub n_ff: usize,
    /// `attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// The RoPE of the global attention layers (frequency factors are filled in by the loader
    /// from `rope_freqs.weight` where the file has one).
    pub rope: Rope,
    /// `attention.sliding_window`, for architectures with local attention layers.
    pub sliding_window: Option<usize>,
    /// `attn_logit_softcapping`: attention scores become `c·tanh(score/c)` (gemma2).
    pub attn_softcap: Option<f32>,
    /// `final_logit_softcapping`: the logits become `c·tanh(logit/c)` (gemma2).
    pub final_softcap: Option<f32>,
    /// `expert_count`: the experts of a mixture-of-experts FFN, 0 for a dense FFN.
    pub n_expert: usize,
    /// `expert_used_count`: the experts each token is routed to.
    pub n_expert_used: usize,
    /// `expert_feed_forward_length`, else `n_ff`: the hidden width of one expert.
    pub n_ff_exp: usize,
}

impl HyperParams {
    /// Reads the hyperparameters of the file's architecture.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let md = file.metadata();
        let arch_name = md.architecture()?;
        let architecture = Architecture::from_name(arch_name)
            .ok_or_else(|| ModelError::UnknownArchitecture(arch_name.to_owned()))?;
        let keys = Keys {
            md,
            arch: arch_name,
        };

        let n_embd = keys.required("embedding_length")?;
        let n_layer = keys.required("block_count")?;
        let n_head = keys.required("attention.head_count")?;
        if n_head == 0 || n_embd % n_head != 0 {
            return Err(keys.bad(
                "attention.head_count",
                format!("{n_head} heads do not divide the embedding width {n_embd}"),
            ));
        }
        let n_head_kv = keys.optional("attention.head_count_kv", n_head)?;
        if n_head_kv == 0 || n_head % n_head_kv != 0 {
            return Err(keys.bad(
                "attention.head_count_kv",
                format!("{n_head_kv} KV heads do not divide the {n_head} query heads"),
            ));
        }
        let head_dim_k = keys.optional("attention.key_length", n_embd / n_head)?;
        let head_dim_v = keys.optional("attention.value_length", n_embd / n_head)?;
        let n_rot = keys.optional("rope.dimension_count", head_dim_k)?;
        if n_rot % 2 != 0 || n_rot > head_dim_k {
            return Err(keys.bad(
                "rope.dimension_count",
                format!("{n_rot} is odd or wider than the {head_dim_k}-wide key heads"),
            ));
        }
        let freq_base = keys.optional_f32("rope.freq_base", 10000.0)?;
        let n_ctx_train = keys.required("context_length")?;
        let n_ctx_orig = keys.optional("rope.scaling.original_context_length", n_ctx_train)?;
        let (freq_scale, yarn, attn_factor) = keys.rope_scaling(n_rot, freq_base, n_ctx_orig)?;
        let rope = Rope {
            style: architecture.rope_style(),
            n_rot,
            freq_base,
            freq_scale,
            freq_factors: None,
            yarn,
            attn_factor,
        };
        let sliding_window = match architecture {
            Architecture::Gemma3 => Some(keys.required("attention.sliding_window")?),
            // llama.cpp's default is Gemma 2's own window.
            Architecture::Gemma2 => Some(keys.optional("attention.sliding_window", 4096)?),
            // llama.cpp ignores phi3's window ("Phi SWA is currently disabled"), and so does
            // plumb, to compute what llama.cpp computes.
            Architecture::Llama
            | Architecture::Qwen2
            | Architecture::Qwen3
            | Architecture::Qwen3Moe
            | Architecture::Phi3 => None,
        };
        // Gemma 2 always caps; llama.cpp's defaults are the published models' values.
        let (attn_softcap, final_softcap) = match architecture {
            Architecture::Gemma2 => (
                Some(keys.softcap("attn_logit_softcapping", 50.0)?),
                Some(keys.softcap("final_logit_softcapping", 30.0)?),
            ),
            _ => (None, None),
        };

        let n_expert = keys.optional_or_zero("expert_count")?;
        let n_expert_used = keys.optional_or_zero("expert_used_count")?;
        if n_expert > 0 && (n_expert_used == 0 || n_expert_used > n_expert) {
            return Err(keys.bad(
                "expert_used_count",
                format!("{n_expert_used} is not between 1 and the {n_expert} experts"),
            ));
        }
        let n_ff = keys.required("feed_forward_length")?;
        // llama.cpp's default expert width: Mixtral's experts are as wide as the dense FFN
        // would be, Qwen3-MoE's share it among the experts a token uses.
        let default_ff_exp = match architecture {
            Architecture::Qwen3Moe if n_expert_used > 0 => n_ff / n_expert_used,
            _ => n_ff,
        };
        let n_ff_exp = keys.optional("expert_feed_forward_length", default_ff_exp)?;

        Ok(HyperParams {
            architecture,
            n_vocab: vocab_size(file, &keys)?,
            n_ctx_train,
            n_ctx_orig,
            n_embd,
            n_layer,
            n_head,
            n_head_kv,
            head_dim_k,
            head_dim_v,
            n_ff,
            rms_eps: md.get_f32(&keys.key("attention.layer_norm_rms_epsilon"))?,
            rope,
            sliding_window,
            attn_softcap,
            final_softcap,
            n_expert,
            n_expert_used,
            n_ff_exp,
        })
    }

    /// Query heads that share one KV head.
    pub fn n_gqa(&self) -> usize {
        self.n_head / self.n_head_kv
    }
}

/// The vocabulary size: the tokenizer's token count, else `vocab_size`, else the embedding
/// table's height. Tensor shapes are then checked against it.
fn vocab_size(file: &GgufFile, keys: &Keys) -> Result<usize> {
    if let Some(value) = keys.md.get("tokenizer.ggml.tokens") {
        if let Some(tokens) = value.as_array() {
            return Ok(tokens.len());
        }
    }
    if keys.md.contains(&keys.key("vocab_size")) {
        return keys.required("vocab_size");
    }
    let embd = file.require_tensor("token_embd.weight")?;
    Ok(embd.shape.get(1).copied().unwrap_or(1) as usize)
}

/// The architecture-prefixed keys of one file.
struct Keys<'a> {
    md: &'a Metadata,
    arch: &'a str,
}

impl Keys<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn required(&self, suffix: &str) -> Result<usize> {
        let key = self.key(suffix);
        let n = self.md.get_usize(&key)?;
        if n == 0 {
            return Err(self.bad(suffix, "must not be zero".to_owned()));
        }
        Ok(n)
    }

    fn optional(&self, suffix: &str, default: usize) -> Result<usize> {
        if self.md.contains(&self.key(suffix)) {
            self.required(suffix)
        } else {
            Ok(default)
        }
    }

    /// A count that may be missing or 0 (llama.cpp's default for the expert counts).
    fn optional_or_zero(&self, suffix: &str) -> Result<usize> {
        let key = self.key(suffix);
        if self.md.contains(&key) {
            Ok(self.md.get_usize(&key)?)
        } else {
            Ok(0)
        }
    }

    fn optional_f32(&self, suffix: &str, default: f32) -> Result<f32> {
        let key = self.key(suffix);
        if self.md.contains(&key) {
            Ok(self.md.get_f32(&key)?)
        } else {
            Ok(default)
        }
    }

    /// A soft-capping value `c > 0` (`c·tanh(x/c)`), or its default.
    fn softcap(&self, suffix: &str, default: f32) -> Result<f32> {
        let cap = self.optional_f32(suffix, default)?;
        if cap.is_finite() && cap > 0.0 {
            Ok(cap)
        } else {
            Err(self.bad(suffix, format!("{cap} is not a positive cap")))
        }
    }

    /// `rope.scaling.type`, `rope.scaling.factor` (or the older `rope.scale_linear`) and
    /// `rope.scaling.attn_factor`, as llama.cpp reads them: the type defaults to linear, a
    /// factor of 0 means no scaling. Returns `freq_scale`, YaRN's blend for a model trained
    /// on `n_ctx_orig` positions, and `attn_factor`.
    fn rope_scaling(
        &self,
        n_rot: usize,
        freq_base: f32,
        n_ctx_orig: usize,
    ) -> Result<(f32, Option<Yarn>, f32)> {
        let type_key = self.key("rope.scaling.type");
        let scaling = if self.md.contains(&type_key) {
            self.md.get_str(&type_key)?
        } else {
            "linear"
        };
        let factor = if self.md.contains(&self.key("rope.scaling.factor")) {
            self.optional_f32("rope.scaling.factor", 0.0)?
        } else {
            self.optional_f32("rope.scale_linear", 0.0)?
        };
        let attn_factor = self.optional_f32("rope.scaling.attn_factor", 1.0)?;
        if !(attn_factor.is_finite() && attn_factor > 0.0) {
            return Err(self.bad(
                "rope.scaling.attn_factor",
                format!("{attn_factor} is not a positive factor"),
            ));
        }
        if factor < 0.0 || !factor.is_finite() {
            return Err(self.bad("rope.scaling.factor", format!("{factor} is not a factor")));
        }
        let freq_scale = if factor == 0.0 { 1.0 } else { 1.0 / factor };
        match scaling {
            "none" => Ok((1.0, None, attn_factor)),
            "linear" => Ok((freq_scale, None, attn_factor)),
            "yarn" => Ok((
                freq_scale,
                Some(Yarn::new(n_rot, n_ctx_orig, freq_base)),
                attn_factor,
            )),
            // LongRoPE rotates linearly (llama.cpp's ext_factor is 0 for it); its per-pair
            // factors are tensors, which only the phi3 architecture file picks (long or short
            // by context). Elsewhere they would be ignored, so such a file is refused.
            "longrope" if self.arch == "phi3" => Ok((freq_scale, None, attn_factor)),
            "longrope" => Err(self.bad(
                "rope.scaling.type",
                format!("longrope RoPE scaling is supported for phi3 only, not {}", self.arch),
            )),
            other => Err(self.bad(
                "rope.scaling.type",
                format!(
                    "{other:?} RoPE scaling is not supported yet (only none, linear, yarn, and longrope for phi3)"
                ),
            )),
        }
    }

    fn bad(&self, suffix: &str, reason: String) -> ModelError {
        ModelError::HyperParam {
            key: self.key(suffix),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use plumb_gguf::GgufWriter;

    use super::*;

    fn file(arch: &str, extra: &[(&str, plumb_gguf::Value)]) -> GgufFile {
        let mut w = GgufWriter::new();
        w.set("general.architecture", arch)
            .set(format!("{arch}.embedding_length"), 64u32)
            .set(format!("{arch}.block_count"), 2u32)
            .set(format!("{arch}.attention.head_count"), 4u32)
            .set(format!("{arch}.context_length"), 128u32)
            .set(format!("{arch}.feed_forward_length"), 96u32)
            .set(format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-5f32)
            .set(format!("{arch}.vocab_size"), 10u32);
        for (k, v) in extra {
            w.set(format!("{arch}.{k}"), v.clone());
        }
        GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap()
    }

    #[test]
    fn missing_keys_take_llama_cpp_defaults() {
        let hp = HyperParams::from_gguf(&file("llama", &[])).unwrap();
        assert_eq!(hp.n_head_kv, 4);
        assert_eq!(hp.head_dim_k, 16);
        assert_eq!(hp.head_dim_v, 16);
        assert_eq!(hp.rope.n_rot, 16);
        assert_eq!(hp.rope.freq_base, 10000.0);
        assert_eq!(hp.rope.freq_scale, 1.0);
        assert_eq!(hp.rope.style, RopeStyle::Normal);
        assert_eq!(hp.n_vocab, 10);
        assert_eq!(hp.sliding_window, None);
    }

    #[test]
    fn present_keys_are_used() {
        use plumb_gguf::Value;
        let hp = HyperParams::from_gguf(&file(
            "qwen2",
            &[
                ("attention.head_count_kv", Value::U32(2)),
                ("attention.key_length", Value::U32(32)),
                ("rope.freq_base", Value::F32(1e6)),
                ("rope.scaling.factor", Value::F32(4.0)),
            ],
        ))
        .unwrap();
        assert_eq!(hp.n_head_kv, 2);
        assert_eq!(hp.n_gqa(), 2);
        assert_eq!(hp.head_dim_k, 32);
        assert_eq!(hp.rope.n_rot, 32);
        assert_eq!(hp.rope.freq_base, 1e6);
        assert_eq!(hp.rope.freq_scale, 0.25);
        assert_eq!(hp.rope.style, RopeStyle::Neox);
        assert_eq!(hp.rope.yarn, None);
    }

    #[test]
    fn gemma2_caps_and_experts_take_llama_cpp_defaults_and_bad_values_name_their_key() {
        use plumb_gguf::Value;
        let hp = HyperParams::from_gguf(&file("gemma2", &[])).unwrap();
        assert_eq!(hp.attn_softcap, Some(50.0));
        assert_eq!(hp.final_softcap, Some(30.0));
        assert_eq!(hp.sliding_window, Some(4096));
        assert_eq!(hp.n_expert, 0);

        let experts = |used: u32| {
            HyperParams::from_gguf(&file(
                "qwen3moe",
                &[
                    ("expert_count", Value::U32(8)),
                    ("expert_used_count", Value::U32(used)),
                ],
            ))
        };
        let hp = experts(2).unwrap();
        assert_eq!((hp.n_expert, hp.n_expert_used), (8, 2));
        // Qwen3-MoE's experts share the FFN width among those a token uses.
        assert_eq!(hp.n_ff_exp, 96 / 2);
        let err = experts(9).unwrap_err();
        assert!(
            err.to_string().contains("qwen3moe.expert_used_count"),
            "{err}"
        );

        let err = HyperParams::from_gguf(&file(
            "gemma2",
            &[("attn_logit_softcapping", Value::F32(-1.0))],
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("gemma2.attn_logit_softcapping"),
            "{err}"
        );
    }

    #[test]
    fn yarn_takes_its_original_context() {
        use plumb_gguf::Value;
        let hp = HyperParams::from_gguf(&file(
            "qwen3",
            &[
                ("rope.scaling.type", Value::String("yarn".into())),
                ("rope.scaling.factor", Value::F32(4.0)),
                ("rope.scaling.original_context_length", Value::U32(32)),
            ],
        ))
        .unwrap();
        assert_eq!(hp.rope.freq_scale, 0.25);
        assert_eq!(hp.rope.yarn, Some(Yarn::new(16, 32, 10000.0)));
        assert_ne!(hp.rope.yarn, Some(Yarn::new(16, 128, 10000.0)));
    }

    #[test]
    fn longrope_is_linear_for_phi3_and_refused_where_its_factors_would_be_ignored() {
        use plumb_gguf::Value;
        let longrope = [("rope.scaling.type", Value::String("longrope".into()))];
        let hp = HyperParams::from_gguf(&file("phi3", &longrope)).unwrap();
        assert_eq!((hp.rope.freq_scale, hp.rope.yarn), (1.0, None));

        let err = HyperParams::from_gguf(&file("llama", &longrope)).unwrap_err();
        assert!(
            err.to_string().contains("llama.rope.scaling.type")
                && err.to_string().contains("phi3 only"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_key() {
        use plumb_gguf::Value;
        let err = HyperParams::from_gguf(&file("mamba", &[])).unwrap_err();
        assert!(err.to_string().contains("\"mamba\""), "{err}");

        let err = HyperParams::from_gguf(&file("gemma3", &[])).unwrap_err();
        assert!(
            err.to_string().contains("gemma3.attention.sliding_window"),
            "{err}"
        );

        let err = HyperParams::from_gguf(&file(
            "llama",
            &[("attention.head_count_kv", Value::U32(3))],
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("llama.attention.head_count_kv"),
            "{err}"
        );

        let err = HyperParams::from_gguf(&file(
            "llama",
            &[("rope.scaling.type", Value::String("dynamic".into()))],
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("llama.rope.scaling.type")
                && err.to_string().contains("dynamic"),
            "{err}"
        );
    }
}
