//! The operations an architecture is written against. A backend (the CPU reference, CPU SIMD,
//! CUDA) implements them once and runs every architecture.
//!
//! Activations are batched: a [`Backend::Tensor`] is a row-major matrix of `n_tokens` rows,
//! one per token of the batch (ggml shape `[width, n_tokens]`). Weights are the backend's own
//! copy or view of a [`WeightTensor`]; a matrix weight with GGUF shape `[k, m]` maps `k`-wide
//! rows to `m`-wide rows. The KV cache's storage is the backend's too: flat slots per layer. Its bookkeeping
//! (which slots hold which positions of which sequence) is shared, in [`crate::KvCache`], and
//! reaches the backend as [`BlockTables`].

use crate::kv_cache::{BlockCopy, BlockTables, KvLayout};
use crate::rope::Rope;
use crate::weights::WeightTensor;
use crate::Result;

/// The shape of a batch of activations.
pub trait Activations {
    /// Rows: one per token.
    fn n_tokens(&self) -> usize;
    /// Elements per row.
    fn width(&self) -> usize;
}

/// The nonlinearity of a gated feed-forward network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x · sigmoid(x)` (SwiGLU): llama, qwen2.
    Silu,
    /// GELU with the tanh approximation (GeGLU): gemma.
    GeluTanh,
}

/// Where one token of the batch sits: its sequence and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenPos {
    pub seq: usize,
    pub pos: usize,
}

/// What [`Backend::attention`] needs besides Q, K and V.
#[derive(Debug, Clone, Copy)]
pub struct AttentionStep<'a> {
    /// The layer, which picks the cache's storage and window.
    pub layer: usize,
    /// Sequence and position of every token (row) of the batch.
    pub tokens: &'a [TokenPos],
    pub n_head: usize,
    /// The factor applied to `q·k` before the softmax.
    pub scale: f32,
    /// The slot each token writes and the block tables it reads through.
    pub kv: BlockTables<'a>,
}

/// The backend operations. Every op either returns a result or an error naming the op; none
/// panics on shapes the architectures produce from validated weights.
pub trait Backend: Send + Sync {
    /// A weight tensor as this backend stores it (a view of the mapped file, a device buffer).
    type Weight: Send + Sync;
    /// A batch of f32 activations, `[n_tokens × width]`.
    type Tensor: Activations;
    /// Per-layer K and V slots of a [`crate::KvCache`].
    type KvStorage: Send;

    /// A short name for messages: `"ref"`, `"cuda"`.
    fn name(&self) -> &'static str;

    /// Takes a weight from the model file. Fails, naming the tensor, when the backend cannot
    /// use its type.
    fn load_weight(&self, tensor: WeightTensor) -> Result<Self::Weight>;

    /// Allocates K/V storage for every layer of `layout`: `n_slots` slots each.
    fn new_kv_storage(&self, layout: &KvLayout) -> Result<Self::KvStorage>;

    /// Copies slots between blocks, in order, in every layer of each copy's group: the
    /// private copy of a shared block that a sequence is about to write.
    fn copy_kv_blocks(&self, kv: &mut Self::KvStorage, copies: &[BlockCopy]) -> Result<()>;

    /// Embedding lookup: row `tokens[t]` of `table` (GGUF shape `[n_embd, n_vocab]`) for each t.
    fn embed(&self, table: &Self::Weight, tokens: &[u32]) -> Result<Self::Tensor>;

    /// RMSNorm: each group of `weight.len()` consecutive elements of a row is divided by its
    /// root mean square (plus `eps` under the root) and multiplied by `weight`. A weight as
    /// wide as the row normalizes the row; one as wide as a head normalizes each head.
    fn rms_norm(&self, x: &Self::Tensor, weight: &Self::Weight, eps: f32) -> Result<Self::Tensor>;

    /// `x · Wᵀ`: each `k`-wide row of `x` times a weight of GGUF shape `[k, m]`.
    fn matmul(&self, x: &Self::Tensor, weight: &Self::Weight) -> Result<Self::Tensor>;

    /// Adds a bias vector to every row.
    fn add_bias(&self, x: Self::Tensor, bias: &Self::Weight) -> Result<Self::Tensor>;

    /// Multiplies every element by `factor`.
    fn scale(&self, x: Self::Tensor, factor: f32) -> Result<Self::Tensor>;

    /// Rotates each `head_dim`-wide head of row `t` by the angles of position `positions[t]`.
    fn rope(
        &self,
        x: Self::Tensor,
        head_dim: usize,
        positions: &[usize],
        rope: &Rope,
    ) -> Result<Self::Tensor>;

    /// Causal attention over the cache. First stores each token's K and V rows (`n_head_kv`
    /// heads each) in its slot (`step.kv.slots`), then, for each token, attends its `n_head`
    /// query heads over the positions of its own sequence up to its own, within the layer's
    /// sliding window if it has one, found through its sequence's block table. Query heads share KV heads in groups of
    /// `n_head / n_head_kv`. Returns `[n_tokens × n_head·head_dim_v]`.
    fn attention(
        &self,
        q: &Self::Tensor,
        k: &Self::Tensor,
        v: &Self::Tensor,
        kv: &mut Self::KvStorage,
        step: &AttentionStep<'_>,
    ) -> Result<Self::Tensor>;

    /// The gated FFN's nonlinearity: `act(gate) ⊙ up`.
    fn gated_activation(
        &self,
        gate: &Self::Tensor,
        up: &Self::Tensor,
        act: Activation,
    ) -> Result<Self::Tensor>;

    /// Elementwise sum (the residual connections).
    fn add(&self, a: &Self::Tensor, b: &Self::Tensor) -> Result<Self::Tensor>;

    /// The given rows, in order (the rows whose logits are wanted).
    fn select_rows(&self, x: &Self::Tensor, rows: &[usize]) -> Result<Self::Tensor>;

    /// A row-major host copy: the logits, and what an [`crate::Observer`] sees.
    fn to_host(&self, x: &Self::Tensor) -> Result<Vec<f32>>;
}
