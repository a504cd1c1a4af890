//! Synthetic GGUF models with random weights: an architecture's tensors and metadata at any
//! size, for tests that need its shape but not its knowledge.

#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;

use plumb_backend_ref::RefBackend;
use plumb_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use plumb_model::{KvConfig, LogitsFor, Model};

#[derive(Debug, Clone)]
pub struct Synthetic {
    pub arch: &'static str,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub n_ctx_train: usize,
    pub sliding_window: Option<usize>,
    /// The type of every matrix; norms and biases stay F32.
    pub matrix_type: GgmlType,
    /// Whether the output projection is tied to the embedding table.
    pub tied: bool,
}

impl Synthetic {
    /// A few-kilobyte model of the architecture. Gemma3 gets six layers, so that one is
    /// global, and a window of 4.
    pub fn tiny(arch: &'static str) -> Self {
        Synthetic {
            arch,
            n_vocab: 64,
            n_embd: 64,
            n_layer: if arch == "gemma3" { 6 } else { 2 },
            n_head: 4,
            n_head_kv: 2,
            head_dim: 16,
            n_ff: 96,
            n_ctx_train: 256,
            sliding_window: (arch == "gemma3").then_some(4),
            matrix_type: GgmlType::F32,
            tied: arch == "gemma3",
        }
    }

    /// The model as a writer, leaving out the tensors `keep` rejects.
    pub fn writer_with(&self, seed: u64, keep: impl Fn(&str) -> bool) -> GgufWriter {
        let mut w = GgufWriter::new();
        let a = self.arch;
        w.set("general.architecture", a)
            .set(format!("{a}.context_length"), self.n_ctx_train as u32)
            .set(format!("{a}.embedding_length"), self.n_embd as u32)
            .set(format!("{a}.block_count"), self.n_layer as u32)
            .set(format!("{a}.feed_forward_length"), self.n_ff as u32)
            .set(format!("{a}.attention.head_count"), self.n_head as u32)
            .set(
                format!("{a}.attention.head_count_kv"),
                self.n_head_kv as u32,
            )
            .set(format!("{a}.attention.key_length"), self.head_dim as u32)
            .set(format!("{a}.attention.value_length"), self.head_dim as u32)
            .set(format!("{a}.attention.layer_norm_rms_epsilon"), 1e-6f32)
            .set(format!("{a}.rope.freq_base"), 10000.0f32)
            .set(format!("{a}.vocab_size"), self.n_vocab as u32);
        if let Some(window) = self.sliding_window {
            w.set(format!("{a}.attention.sliding_window"), window as u32);
        }

        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (e, q, kv, ff) = (
            self.n_embd,
            self.n_head * self.head_dim,
            self.n_head_kv * self.head_dim,
            self.n_ff,
        );
        let mut tensors: Vec<(String, Kind, Vec<usize>)> = vec![
            (
                "token_embd.weight".into(),
                Kind::Matrix,
                vec![e, self.n_vocab],
            ),
            ("output_norm.weight".into(), Kind::Norm, vec![e]),
        ];
        if !self.tied {
            tensors.push(("output.weight".into(), Kind::Matrix, vec![e, self.n_vocab]));
        }
        for il in 0..self.n_layer {
            let b = |n: &str| format!("blk.{il}.{n}");
            tensors.extend([
                (b("attn_norm.weight"), Kind::Norm, vec![e]),
                (b("attn_q.weight"), Kind::Matrix, vec![e, q]),
                (b("attn_k.weight"), Kind::Matrix, vec![e, kv]),
                (b("attn_v.weight"), Kind::Matrix, vec![e, kv]),
                (b("attn_output.weight"), Kind::Matrix, vec![q, e]),
                (b("ffn_norm.weight"), Kind::Norm, vec![e]),
                (b("ffn_gate.weight"), Kind::Matrix, vec![e, ff]),
                (b("ffn_up.weight"), Kind::Matrix, vec![e, ff]),
                (b("ffn_down.weight"), Kind::Matrix, vec![ff, e]),
            ]);
            if self.arch == "qwen2" {
                tensors.extend([
                    (b("attn_q.bias"), Kind::Bias, vec![q]),
                    (b("attn_k.bias"), Kind::Bias, vec![kv]),
                    (b("attn_v.bias"), Kind::Bias, vec![kv]),
                ]);
            }
            if self.arch == "gemma3" {
                tensors.extend([
                    (b("attn_q_norm.weight"), Kind::Norm, vec![self.head_dim]),
                    (b("attn_k_norm.weight"), Kind::Norm, vec![self.head_dim]),
                    (b("post_attention_norm.weight"), Kind::Norm, vec![e]),
                    (b("post_ffw_norm.weight"), Kind::Norm, vec![e]),
                ]);
            }
        }
        for (name, kind, shape) in tensors {
            let n: usize = shape.iter().product();
            // Matrices scaled by 1/√fan_in keep activations near unit size through the layers.
            let values: Vec<f32> = match kind {
                Kind::Matrix => {
                    let scale = 1.0 / (shape[0] as f32).sqrt();
                    (0..n).map(|_| rng.uniform() * scale).collect()
                }
                Kind::Norm => (0..n).map(|_| 1.0 + 0.1 * rng.uniform()).collect(),
                Kind::Bias => (0..n).map(|_| 0.1 * rng.uniform()).collect(),
            };
            if !keep(&name) {
                continue;
            }
            let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            if kind == Kind::Matrix && self.matrix_type != GgmlType::F32 {
                let bytes = plumb_ggml::quantize_row_to_vec(self.matrix_type, &values).unwrap();
                w.add_tensor(name, self.matrix_type, &shape, bytes).unwrap();
            } else {
                w.add_f32(name, &shape, &values).unwrap();
            }
        }
        w
    }

    pub fn writer(&self, seed: u64) -> GgufWriter {
        self.writer_with(seed, |_| true)
    }

    pub fn file(&self, seed: u64) -> Arc<GgufFile> {
        file_of(&self.writer(seed))
    }
}

pub fn file_of(writer: &GgufWriter) -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(writer.to_bytes().unwrap()).unwrap())
}

/// Replaces one metadata value of a model.
pub fn with_key(mut writer: GgufWriter, key: &str, value: impl Into<Value>) -> GgufWriter {
    writer.set(key, value);
    writer
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Matrix,
    Norm,
    Bias,
}

/// xorshift64*: reproducible weights without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// max |a − b| / max |b|.
pub fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale.max(f32::MIN_POSITIVE)
}

/// The architectures a synthetic model comes in.
pub const ARCHS: [&str; 3] = ["llama", "qwen2", "gemma3"];

/// A tiny synthetic model of `arch` on the reference backend.
pub fn tiny_model(arch: &'static str) -> Model<RefBackend> {
    Model::from_file(Synthetic::tiny(arch).file(7), RefBackend::new()).unwrap()
}

/// The logits of every position of `tokens`, from one pass in a fresh cache.
pub fn full_pass(model: &Model<RefBackend>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let mut cache = model
        .new_kv_cache(KvConfig::new(tokens.len(), 1, tokens.len()))
        .unwrap();
    let logits = model.eval(&mut cache, 0, tokens, LogitsFor::All).unwrap();
    logits.rows().map(<[f32]>::to_vec).collect()
}
