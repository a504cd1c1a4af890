//! Tiny random-weight models of the architectures plumb runs (`plumb synth --arch NAME`), to
//! check plumb against llama.cpp where no real file of the architecture is at hand.
//!
//! Each has the architecture's real tensor names, shapes and metadata keys, a handful of
//! layers of width 64–128, all weights in F32 (so that llama.cpp computes in f32 as the
//! reference does), and the tokenizer of a real model copied key by key from its GGUF file, so
//! that llama.cpp tokenizes text as it would for a real model. The weights are scaled for
//! decisive outputs: queries and keys make attention weights far from uniform (so RoPE and the
//! masks matter), and the logits spread over about ±25, so that most positions have a top-1
//! that leads its runner-up by more than 1 (a KL check on flat distributions proves nothing).
//! Norm weights scatter around 1, so a norm applied in the wrong place shows. Every value is
//! a function of the seed, the tensor's name and its row: the same inputs give the same bytes.

use std::f64::consts::PI;
use std::path::Path;

use plumb_gguf::{GgmlType, GgufStreamWriter, Metadata, TensorSpec, Value};

use crate::weights::{fnv1a, normal_row};
use crate::{FileType, SynthError};

/// The models, by the name `--arch` takes.
pub const ARCH_MODELS: [ArchModel; 9] = [
    LLAMA3, MISTRAL, QWEN3, QWEN3_YARN, GEMMA2, PHI3, PHI3_SHORT, MIXTRAL, QWEN3MOE,
];

/// One tiny model: its architecture and shape, and the options that make it that model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArchModel {
    pub name: &'static str,
    /// `general.architecture`.
    pub architecture: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Width of one query/key/value head; `n_embd / n_head` unless the model says otherwise.
    pub head_dim: usize,
    pub n_ff: usize,
    pub rope_freq_base: f32,
    /// The standard deviation of the embeddings.
    pub embd_std: f32,
    /// An `output.weight` of its own, of this standard deviation, rather than the embedding
    /// table tied to it. Tied to a unit-RMS final state, a token's own embedding would give it
    /// the top logit at nearly every position, whatever the layers computed.
    pub output_std: Option<f32>,
    pub rope_scaling: RopeScaling,
    pub options: Options,
    /// Mixture-of-experts FFNs in place of the dense ones.
    pub experts: Option<Experts>,
}

/// The experts of every layer's FFN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Experts {
    pub n_expert: usize,
    /// `expert_used_count`.
    pub n_used: usize,
    /// `expert_feed_forward_length`, written when given; else the experts are `n_ff` wide.
    pub n_ff_exp: Option<usize>,
}

/// How the model scales RoPE for long contexts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeScaling {
    None,
    /// `rope_freqs.weight`, computed as the converter does for Llama 3.1's "llama3" rope
    /// scaling from these settings.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_context: f64,
    },
    /// `rope.scaling.type` yarn with this factor and `rope.scaling.original_context_length`.
    Yarn {
        factor: f32,
        original_context: u32,
    },
    /// Phi-3's LongRoPE: `rope_factors_long` and `rope_factors_short` and the
    /// `rope.scaling.attn_factor` its converter computes, for a context of `context_length`
    /// stretched from `original_context`; with `rope.scaling.type` longrope written out where
    /// `typed` (newer converters do, older ones leave the type to the architecture).
    LongRope {
        original_context: u32,
        typed: bool,
    },
}

/// What sets a model apart from the plain Llama decoder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Options {
    Plain,
    /// Per-head RMSNorm of queries and keys (`attn_q_norm`, `attn_k_norm`).
    QkNorm,
    /// Phi-3: Q, K and V fused into `attn_qkv`, gate and up into `ffn_up` (gate first), and a
    /// `sliding_window` key that llama.cpp ignores.
    Phi3 {
        sliding_window: usize,
    },
    /// Gemma 2: post-norms, sliding window, soft-capping. Its embeddings, scaled by
    /// `√n_embd`, dominate the residual stream, and its output is tied to them; post-norm
    /// weights around `post_norm_mean` let the layers' outputs compete.
    Gemma2 {
        sliding_window: usize,
        attn_softcap: f32,
        final_softcap: f32,
        post_norm_mean: f32,
    },
}

/// Llama 3.1-style: GQA and RoPE frequency factors. The factors' original context is 256
/// rather than 8192, and the base 10000 rather than 500000, so that the factors change angles
/// within a few hundred positions, where a test can see them.
pub const LLAMA3: ArchModel = ArchModel {
    name: "llama3",
    architecture: "llama",
    n_layer: 2,
    n_embd: 64,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 16,
    n_ff: 128,
    rope_freq_base: 10000.0,
    embd_std: 1.0,
    output_std: Some(1.5),
    rope_scaling: RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 256.0,
    },
    options: Options::Plain,
    experts: None,
};

/// Mistral 7B's layout in small: 4 query heads per KV head, RoPE base 1e6.
pub const MISTRAL: ArchModel = ArchModel {
    name: "mistral",
    architecture: "llama",
    n_layer: 2,
    n_embd: 128,
    n_head: 8,
    n_head_kv: 2,
    head_dim: 16,
    n_ff: 256,
    rope_freq_base: 1_000_000.0,
    embd_std: 1.0,
    output_std: Some(1.5),
    rope_scaling: RopeScaling::None,
    options: Options::Plain,
    experts: None,
};

/// Qwen3: heads wider than `n_embd / n_head` (as Qwen3 0.6B's 128 against 1024/16), Q/K norms.
pub const QWEN3: ArchModel = ArchModel {
    name: "qwen3",
    architecture: "qwen3",
    n_layer: 2,
    n_embd: 64,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 32,
    n_ff: 128,
    rope_freq_base: 1_000_000.0,
    embd_std: 1.0,
    output_std: Some(1.5),
    rope_scaling: RopeScaling::None,
    options: Options::QkNorm,
    experts: None,
};

/// Qwen3 with YaRN, as Qwen3's long-context files are (factor 4), but an original context of
/// 64 positions rather than 32768, so that the prompts reach past it.
pub const QWEN3_YARN: ArchModel = ArchModel {
    name: "qwen3-yarn",
    rope_scaling: RopeScaling::Yarn {
        factor: 4.0,
        original_context: 64,
    },
    ..QWEN3
};

/// Gemma 2: local layers 0 and 2 with a 32-position window, global layers 1 and 3, and its
/// output tied to the embeddings (llama.cpp's gemma2 reads no `output.weight`). The logits are
/// capped at Gemma 2's 30; the attention scores at 8 rather than 50, since these tiny heads'
/// scores of a few units would hardly feel a cap of 50.
pub const GEMMA2: ArchModel = ArchModel {
    name: "gemma2",
    architecture: "gemma2",
    n_layer: 4,
    n_embd: 64,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 16,
    n_ff: 128,
    rope_freq_base: 10000.0,
    embd_std: 0.6,
    output_std: None,
    rope_scaling: RopeScaling::None,
    options: Options::Gemma2 {
        sliding_window: 32,
        attn_softcap: 8.0,
        final_softcap: 30.0,
        post_norm_mean: 3.0,
    },
    experts: None,
};

/// Phi-3 mini 128k's layout in small: fused projections, LongRoPE from an original context of
/// 128 positions (which the prompts pass) to 4096, and a sliding window of 64 that llama.cpp
/// does not apply.
pub const PHI3: ArchModel = ArchModel {
    name: "phi3",
    architecture: "phi3",
    n_layer: 2,
    n_embd: 64,
    n_head: 4,
    n_head_kv: 2,
    head_dim: 16,
    n_ff: 128,
    rope_freq_base: 10000.0,
    embd_std: 1.0,
    output_std: Some(1.5),
    rope_scaling: RopeScaling::LongRope {
        original_context: 128,
        typed: false,
    },
    options: Options::Phi3 { sliding_window: 64 },
    experts: None,
};

/// Phi-3 within its original context: the golden runs' 1024 positions stay under 2048, so
/// llama.cpp (and plumb) rotate with `rope_factors_short`; the scaling type is written out.
pub const PHI3_SHORT: ArchModel = ArchModel {
    name: "phi3-short",
    rope_scaling: RopeScaling::LongRope {
        original_context: 2048,
        typed: true,
    },
    ..PHI3
};

/// Mixtral's layout in small: a llama with 4 experts per layer, 2 used per token.
pub const MIXTRAL: ArchModel = ArchModel {
    name: "mixtral",
    experts: Some(Experts {
        n_expert: 4,
        n_used: 2,
        n_ff_exp: None,
    }),
    ..MISTRAL
};

/// Qwen3-MoE's layout in small: qwen3 with 8 experts of width 64 per layer, 2 used per token.
pub const QWEN3MOE: ArchModel = ArchModel {
    name: "qwen3moe",
    architecture: "qwen3moe",
    experts: Some(Experts {
        n_expert: 8,
        n_used: 2,
        n_ff_exp: Some(64),
    }),
    ..QWEN3
};

const RMS_EPS: f32 = 1e-6;
const CONTEXT_LENGTH: u32 = 4096;
/// `general.file_type` of a file whose tensors are all F32 (`LLAMA_FTYPE_ALL_F32`).
const FTYPE_ALL_F32: u32 = 0;

impl ArchModel {
    pub fn named(name: &str) -> Result<ArchModel, SynthError> {
        ARCH_MODELS
            .into_iter()
            .find(|m| m.name == name)
            .ok_or_else(|| SynthError::UnknownArchModel(name.to_owned()))
    }
}

/// How a tensor's values are made.
enum Init {
    /// Near-normal, mean 0, this standard deviation.
    Normal(f32),
    /// A norm's weight: near-normal around `mean`, of standard deviation `std`.
    Norm {
        mean: f32,
        std: f32,
    },
    Values(Vec<f32>),
}

struct Planned {
    name: String,
    shape: Vec<usize>,
    init: Init,
}

/// Writes `model` to `path`, with the `tokenizer.*` keys of `tokenizer` (a real model's
/// metadata) and weights from `seed`. The matrices (embeddings, projections, experts) are
/// `file_type`'s default type, or F32 for `None`; norms, routers and RoPE factors are F32.
pub fn write_arch_model(
    model: &ArchModel,
    tokenizer: &Metadata,
    path: &Path,
    seed: u64,
    file_type: Option<FileType>,
) -> Result<(), SynthError> {
    let n_vocab = match tokenizer.get("tokenizer.ggml.tokens") {
        Some(Value::Array(tokens)) => tokens.len(),
        _ => return Err(SynthError::NoTokenizer),
    };
    let mut md = metadata(model, tokenizer);
    let matrix_type = file_type.map_or(GgmlType::F32, FileType::default_type);
    if let Some(file_type) = file_type {
        md.set("general.file_type", file_type.llama_ftype());
    }
    let tensors = plan(model, n_vocab);
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|t| TensorSpec {
            name: t.name.clone(),
            // llama-quantize leaves the routers (ffn_gate_inp) in F32, as it does the norms.
            ggml_type: match t.init {
                Init::Normal(_) if t.shape.len() > 1 && !t.name.contains("ffn_gate_inp") => {
                    matrix_type
                }
                _ => GgmlType::F32,
            },
            shape: t.shape.iter().map(|&d| d as u64).collect(),
        })
        .collect();
    let mut out = GgufStreamWriter::create(path, &md, &specs)?;
    for (t, spec) in tensors.iter().zip(&specs) {
        out.write_data(&values(seed, t, spec.ggml_type)?)?;
    }
    Ok(out.finish()?)
}

fn metadata(model: &ArchModel, tokenizer: &Metadata) -> Metadata {
    let arch = model.architecture;
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let u32_of = |n: usize| n as u32;
    let mut md = Metadata::new();
    md.set("general.architecture", arch);
    // The model's name stays out of `general.name`: llama.cpp changes a vocabulary's token
    // attributes by the model name ("phi3" there expects Phi-3's own tokens).
    md.set("general.name", "plumb synthetic model (random weights)");
    md.set(
        "general.description",
        format!("plumb synth --arch {} ({arch})", model.name),
    );
    md.set("general.file_type", FTYPE_ALL_F32);
    md.set(key("context_length"), CONTEXT_LENGTH);
    md.set(key("embedding_length"), u32_of(model.n_embd));
    md.set(key("block_count"), u32_of(model.n_layer));
    md.set(key("feed_forward_length"), u32_of(model.n_ff));
    md.set(key("attention.head_count"), u32_of(model.n_head));
    md.set(key("attention.head_count_kv"), u32_of(model.n_head_kv));
    md.set(key("attention.key_length"), u32_of(model.head_dim));
    md.set(key("attention.value_length"), u32_of(model.head_dim));
    md.set(key("rope.dimension_count"), u32_of(model.head_dim));
    md.set(key("rope.freq_base"), model.rope_freq_base);
    md.set(key("attention.layer_norm_rms_epsilon"), RMS_EPS);
    if let RopeScaling::Yarn {
        factor,
        original_context,
    } = model.rope_scaling
    {
        md.set(key("rope.scaling.type"), "yarn");
        md.set(key("rope.scaling.factor"), factor);
        md.set(
            key("rope.scaling.original_context_length"),
            original_context,
        );
    }
    if let RopeScaling::LongRope {
        original_context,
        typed,
    } = model.rope_scaling
    {
        if typed {
            md.set(key("rope.scaling.type"), "longrope");
        }
        md.set(
            key("rope.scaling.original_context_length"),
            original_context,
        );
        md.set(
            key("rope.scaling.attn_factor"),
            longrope_attn_factor(original_context),
        );
    }
    if let Some(experts) = model.experts {
        md.set(key("expert_count"), u32_of(experts.n_expert));
        md.set(key("expert_used_count"), u32_of(experts.n_used));
        if let Some(n_ff_exp) = experts.n_ff_exp {
            md.set(key("expert_feed_forward_length"), u32_of(n_ff_exp));
        }
    }
    if let Options::Phi3 { sliding_window } = model.options {
        md.set(key("attention.sliding_window"), u32_of(sliding_window));
    }
    if let Options::Gemma2 {
        sliding_window,
        attn_softcap,
        final_softcap,
        ..
    } = model.options
    {
        md.set(key("attention.sliding_window"), u32_of(sliding_window));
        md.set(key("attn_logit_softcapping"), attn_softcap);
        md.set(key("final_logit_softcapping"), final_softcap);
    }
    for (k, v) in tokenizer
        .iter()
        .filter(|(k, _)| k.starts_with("tokenizer."))
    {
        md.set(k, v.clone());
    }
    md
}

fn plan(model: &ArchModel, n_vocab: usize) -> Vec<Planned> {
    let d = model.n_embd;
    let (q_width, kv_width) = (
        model.n_head * model.head_dim,
        model.n_head_kv * model.head_dim,
    );
    let inv_sqrt = |n: usize| 1.0 / (n as f32).sqrt();
    let mut tensors = Vec::new();
    let mut add = |name: String, shape: &[usize], init: Init| {
        tensors.push(Planned {
            name,
            shape: shape.to_vec(),
            init,
        })
    };
    let norm = || Init::Norm {
        mean: 1.0,
        std: 0.2,
    };
    let post_norm = || match model.options {
        Options::Gemma2 { post_norm_mean, .. } => Init::Norm {
            mean: post_norm_mean,
            std: 0.2 * post_norm_mean,
        },
        _ => norm(),
    };
    add(
        "token_embd.weight".into(),
        &[d, n_vocab],
        Init::Normal(model.embd_std),
    );
    if let RopeScaling::Llama3 {
        factor,
        low_freq_factor,
        high_freq_factor,
        original_context,
    } = model.rope_scaling
    {
        let factors = llama3_rope_factors(
            model.head_dim,
            model.rope_freq_base,
            factor,
            low_freq_factor,
            high_freq_factor,
            original_context,
        );
        add(
            "rope_freqs.weight".into(),
            &[model.head_dim / 2],
            Init::Values(factors),
        );
    }
    if let RopeScaling::LongRope { .. } = model.rope_scaling {
        // Phi-3's factors grow with the pair's wavelength: the long ones from 1 to about 16,
        // the short ones to about 1.5.
        let pairs = model.head_dim / 2;
        let ramp = |i: usize| i as f32 / (pairs - 1) as f32;
        let long = (0..pairs).map(|i| 1.0 + 15.0 * ramp(i) * ramp(i)).collect();
        let short = (0..pairs).map(|i| 1.0 + 0.5 * ramp(i)).collect();
        add(
            "rope_factors_long.weight".into(),
            &[pairs],
            Init::Values(long),
        );
        add(
            "rope_factors_short.weight".into(),
            &[pairs],
            Init::Values(short),
        );
    }
    let fused = matches!(model.options, Options::Phi3 { .. });
    for il in 0..model.n_layer {
        let name = |n: &str| format!("blk.{il}.{n}.weight");
        add(name("attn_norm"), &[d], norm());
        if fused {
            // Q and K at twice V's scale, as below, would need rows of two scales; all at
            // 1.5 makes the scores as decisive.
            let qkv = [d, q_width + 2 * kv_width];
            add(name("attn_qkv"), &qkv, Init::Normal(1.5 * inv_sqrt(d)));
        } else {
            // Queries and keys twice the usual scale: scores of a few units, a peaked softmax.
            add(
                name("attn_q"),
                &[d, q_width],
                Init::Normal(2.0 * inv_sqrt(d)),
            );
            add(
                name("attn_k"),
                &[d, kv_width],
                Init::Normal(2.0 * inv_sqrt(d)),
            );
            add(name("attn_v"), &[d, kv_width], Init::Normal(inv_sqrt(d)));
        }
        if model.options == Options::QkNorm {
            add(name("attn_q_norm"), &[model.head_dim], norm());
            add(name("attn_k_norm"), &[model.head_dim], norm());
        }
        add(
            name("attn_output"),
            &[q_width, d],
            Init::Normal(inv_sqrt(q_width)),
        );
        let gemma2 = matches!(model.options, Options::Gemma2 { .. });
        if gemma2 {
            add(name("post_attention_norm"), &[d], post_norm());
        }
        add(name("ffn_norm"), &[d], norm());
        if let Some(experts) = model.experts {
            // A decisive router: near ties would make the choice of experts hang on rounding.
            let (n_exp, n_ff) = (experts.n_expert, experts.n_ff_exp.unwrap_or(model.n_ff));
            let router = Init::Normal(6.0 * inv_sqrt(d));
            add(name("ffn_gate_inp"), &[d, n_exp], router);
            let (up, down) = ([d, n_ff, n_exp], [n_ff, d, n_exp]);
            add(name("ffn_gate_exps"), &up, Init::Normal(inv_sqrt(d)));
            add(name("ffn_up_exps"), &up, Init::Normal(inv_sqrt(d)));
            add(name("ffn_down_exps"), &down, Init::Normal(inv_sqrt(n_ff)));
        } else if fused {
            let up = [d, 2 * model.n_ff];
            add(name("ffn_up"), &up, Init::Normal(inv_sqrt(d)));
            add(
                name("ffn_down"),
                &[model.n_ff, d],
                Init::Normal(inv_sqrt(model.n_ff)),
            );
        } else {
            add(
                name("ffn_gate"),
                &[d, model.n_ff],
                Init::Normal(inv_sqrt(d)),
            );
            add(name("ffn_up"), &[d, model.n_ff], Init::Normal(inv_sqrt(d)));
            add(
                name("ffn_down"),
                &[model.n_ff, d],
                Init::Normal(inv_sqrt(model.n_ff)),
            );
        }
        if gemma2 {
            add(name("post_ffw_norm"), &[d], post_norm());
        }
    }
    add("output_norm.weight".into(), &[d], norm());
    if let Some(std) = model.output_std {
        add("output.weight".into(), &[d, n_vocab], Init::Normal(std));
    }
    tensors
}

/// The tensor's values, row by row in `ggml_type` (quantized by plumb's reference quantizers).
fn values(seed: u64, t: &Planned, ggml_type: GgmlType) -> Result<Vec<u8>, SynthError> {
    let row_len = t.shape[0];
    let n_rows = t.shape[1..].iter().product::<usize>();
    let name_hash = fnv1a(t.name.as_bytes());
    let row_bytes = ggml_type.block_bytes() * row_len / ggml_type.block_size();
    let mut all = vec![0u8; row_bytes * n_rows];
    let mut row = vec![0.0f32; row_len];
    for r in 0..n_rows {
        match &t.init {
            Init::Normal(std) => normal_row(seed, name_hash, r as u64, *std, &mut row),
            Init::Norm { mean, std } => {
                normal_row(seed, name_hash, r as u64, *std, &mut row);
                row.iter_mut().for_each(|v| *v += mean);
            }
            Init::Values(v) => row.copy_from_slice(&v[r * row_len..(r + 1) * row_len]),
        }
        plumb_ggml::quantize_row(
            ggml_type,
            &row,
            &mut all[r * row_bytes..(r + 1) * row_bytes],
        )?;
    }
    Ok(all)
}

/// Phi-3's converter's magnitude for LongRoPE: `√(1 + ln(s)/ln(original))` for the stretch
/// `s = context_length / original`.
fn longrope_attn_factor(original_context: u32) -> f32 {
    let original = f64::from(original_context);
    let scale = f64::from(CONTEXT_LENGTH) / original;
    (1.0 + scale.ln() / original.ln()).sqrt() as f32
}

/// The divisors of RoPE's frequencies for Llama 3.1's "llama3" scaling, as
/// `convert_hf_to_gguf.py` writes them to `rope_freqs.weight`: pairs whose wavelength is
/// shorter than `original_context / high_freq_factor` keep their frequency, those longer than
/// `original_context / low_freq_factor` are slowed by `factor`, and those between are
/// interpolated smoothly.
fn llama3_rope_factors(
    head_dim: usize,
    base: f32,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_context: f64,
) -> Vec<f32> {
    let low_freq_wavelen = original_context / low_freq_factor;
    let high_freq_wavelen = original_context / high_freq_factor;
    (0..head_dim / 2)
        .map(|i| {
            let freq = 1.0 / f64::from(base).powf(2.0 * i as f64 / head_dim as f64);
            let wavelen = 2.0 * PI / freq;
            let divisor = if wavelen < high_freq_wavelen {
                1.0
            } else if wavelen > low_freq_wavelen {
                factor
            } else {
                let smooth = (original_context / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            divisor as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_factors_keep_high_frequencies_and_slow_low_ones() {
        let f = llama3_rope_factors(16, 10000.0, 8.0, 1.0, 4.0, 256.0);
        // Wavelengths 2π·10000^(i/8): 6.3, 20, 63 keep; 199 is between 64 and 256; the rest
        // are slowed by 8.
        assert_eq!(&f[..3], &[1.0, 1.0, 1.0]);
        assert!(f[3] > 1.0 && f[3] < 8.0, "{f:?}");
        assert_eq!(&f[4..], &[8.0; 4]);
    }

    #[test]
    fn every_model_is_named_and_found() {
        for m in ARCH_MODELS {
            assert_eq!(ArchModel::named(m.name).unwrap(), m);
        }
        assert!(ArchModel::named("mamba").is_err());
    }
}
