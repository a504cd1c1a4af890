//! The model shapes `plumb synth` makes: the hyperparameters of real llama-architecture
//! models, and a tiny one for tests.

use crate::SynthError;

/// The dimensions and constants of a llama-architecture model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub name: &'static str,
    pub n_layer: usize,
    pub n_embd: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub n_ff: usize,
    pub n_vocab: usize,
    /// The training context, `llama.context_length`.
    pub n_ctx: usize,
    pub rope_freq_base: f32,
    pub rms_eps: f32,
}

pub const TINYLLAMA_1_1B: Shape = Shape {
    name: "tinyllama-1.1b",
    n_layer: 22,
    n_embd: 2048,
    n_head: 32,
    n_head_kv: 4,
    n_ff: 5632,
    n_vocab: 32000,
    n_ctx: 2048,
    rope_freq_base: 10000.0,
    rms_eps: 1e-5,
};

pub const LLAMA2_7B: Shape = Shape {
    name: "llama2-7b",
    n_layer: 32,
    n_embd: 4096,
    n_head: 32,
    n_head_kv: 32,
    n_ff: 11008,
    n_vocab: 32000,
    n_ctx: 4096,
    rope_freq_base: 10000.0,
    rms_eps: 1e-5,
};

pub const LLAMA3_8B: Shape = Shape {
    name: "llama3-8b",
    n_layer: 32,
    n_embd: 4096,
    n_head: 32,
    n_head_kv: 8,
    n_ff: 14336,
    n_vocab: 128256,
    n_ctx: 8192,
    rope_freq_base: 500000.0,
    rms_eps: 1e-5,
};

/// A model of about a megabyte for tests: widths that are whole K-quant blocks (256), GQA,
/// and four layers, enough for Q4_K_M to give some layers Q6_K and others Q4_K.
pub const TINY: Shape = Shape {
    name: "tiny",
    n_layer: 4,
    n_embd: 256,
    n_head: 4,
    n_head_kv: 2,
    n_ff: 512,
    n_vocab: 512,
    n_ctx: 512,
    rope_freq_base: 10000.0,
    rms_eps: 1e-5,
};

/// Every shape, real ones first.
pub const SHAPES: [Shape; 4] = [TINYLLAMA_1_1B, LLAMA2_7B, LLAMA3_8B, TINY];

impl Shape {
    pub fn named(name: &str) -> Result<Shape, SynthError> {
        SHAPES
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| SynthError::UnknownShape(name.to_owned()))
    }

    /// The same model with only its first `n_layer` layers, for quick files of a real width.
    pub fn with_layers(self, n_layer: usize) -> Result<Shape, SynthError> {
        if n_layer == 0 || n_layer > self.n_layer {
            return Err(SynthError::LayerCount {
                shape: self.name,
                requested: n_layer,
                max: self.n_layer,
            });
        }
        Ok(Shape { n_layer, ..self })
    }

    pub fn head_dim(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// The width of the keys (and values) of one token: what `attn_k` and `attn_v` produce.
    pub fn n_embd_kv(&self) -> usize {
        self.head_dim() * self.n_head_kv
    }
}
