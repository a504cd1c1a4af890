//! The operations an architecture is written against. A backend (the CPU reference, CPU SIMD,
//! CUDA) implements them once and runs every architecture.
//!
//! Activations are batched: a [`Backend::Tensor`] is a row-major matrix of `n_tokens` rows,
//! one per token of the batch (ggml shape `[width, n_tokens]`). Weights are the backend's own
//! copy or view of a [`WeightTensor`]; a matrix weight with GGUF shape `[k, m]` maps `k`-wide
//! rows to `m`-wide rows. The KV cache's storage is the backend's too: flat slots per layer.
//! Its bookkeeping (which slots hold which positions of which sequence) is shared, in
//! [`crate::KvCache`].
//!
//! A forward pass starts with [`Backend::begin_pass`], which receives everything about the
//! batch at once ([`PassInputs`]: tokens, positions, the KV slots and block tables, the rows
//! whose logits are wanted) and keeps it where the backend computes; the ops that need it take
//! the backend's [`Backend::Pass`]. A device backend uploads these few small buffers once per
//! pass, and can replay a pass of the same shape with only them changed.
//!
//! Some ops are composites ([`Backend::qkv`], [`Backend::gated_ffn`],
//! [`Backend::add_rms_norm`], [`Backend::rope_store_kv`]) with default implementations from the
//! primitives, so that the architecture files stay plain while a backend may fuse them.

use crate::kv_cache::{BlockCopy, KvLayout, PassKv};
use crate::rope::Rope;
use crate::routing::{route, Route};
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

/// How a model uses a weight, so that a backend can place it: a table read a few rows at a
/// time may stay on the host, a matrix belongs where the products run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightUse {
    /// Rows are looked up by token id ([`Backend::embed`]).
    Embedding,
    /// The weight of a matrix product ([`Backend::matmul`]).
    Matrix,
    /// A vector: a norm's weight, a bias.
    Vector,
}

/// Where one token of the batch sits: its sequence and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenPos {
    pub seq: usize,
    pub pos: usize,
}

/// Everything a forward pass needs to know about its batch, handed to the backend once by
/// [`Backend::begin_pass`].
pub struct PassInputs<'a> {
    pub tokens: &'a [u32],
    /// Sequence and position of every token.
    pub places: &'a [TokenPos],
    /// `places[t].pos` for each token, the form RoPE takes.
    pub positions: Vec<usize>,
    /// Batch rows whose logits are wanted, in order.
    pub output_rows: &'a [usize],
    /// Per layer, the slot each token writes its key and value to and the block tables it
    /// reads through.
    pub kv: PassKv<'a>,
}

impl<'a> PassInputs<'a> {
    pub fn new(
        tokens: &'a [u32],
        places: &'a [TokenPos],
        output_rows: &'a [usize],
        kv: PassKv<'a>,
    ) -> Self {
        PassInputs {
            tokens,
            places,
            positions: places.iter().map(|p| p.pos).collect(),
            output_rows,
            kv,
        }
    }

    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }
}

/// What [`Backend::attention`] needs to know about the layer besides the pass.
#[derive(Debug, Clone, Copy)]
pub struct AttentionStep {
    /// The layer, which picks the cache's storage, window and block tables.
    pub layer: usize,
    pub n_head: usize,
    /// The factor applied to `q·k` before the softmax.
    pub scale: f32,
    /// Soft-capping of the scaled scores, `c·tanh(score/c)`, before the softmax (gemma2).
    pub softcap: Option<f32>,
}

/// A projection `x · Wᵀ (+ b)`: a matrix weight and its optional bias.
pub struct Projection<'w, W> {
    pub weight: &'w W,
    pub bias: Option<&'w W>,
}

impl<W> Clone for Projection<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for Projection<'_, W> {}

/// The weights of a gated feed-forward network: `down(act(gate(x)) ⊙ up(x))`.
pub struct GatedFfnWeights<'w, W> {
    pub gate: Projection<'w, W>,
    pub up: Projection<'w, W>,
    pub down: Projection<'w, W>,
    pub activation: Activation,
}

/// The weights of a mixture-of-experts FFN: a router and gated experts.
pub struct MoeFfnWeights<'w, W> {
    /// `ffn_gate_inp`: one logit per expert from each row.
    pub router: &'w W,
    pub experts: Vec<GatedFfnWeights<'w, W>>,
    /// Experts each token is routed to.
    pub n_used: usize,
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
    /// One pass's inputs as the backend keeps them (host slices, device buffers).
    type Pass<'p>;

    /// A short name for messages: `"ref"`, `"cuda"`.
    fn name(&self) -> &'static str;

    /// Takes a weight from the model file, to be used as `usage` says. Fails, naming the
    /// tensor, when the backend cannot use its type.
    fn load_weight(&self, tensor: WeightTensor, usage: WeightUse) -> Result<Self::Weight>;

    /// Allocates K/V storage for every layer of `layout`: `n_slots` slots each.
    fn new_kv_storage(&self, layout: &KvLayout) -> Result<Self::KvStorage>;

    /// Copies slots between blocks, in order, in every layer of each copy's group: the
    /// private copy of a shared block that a sequence is about to write.
    fn copy_kv_blocks(&self, kv: &mut Self::KvStorage, copies: &[BlockCopy]) -> Result<()>;

    /// Takes one pass's inputs, before its first op.
    fn begin_pass<'p>(&self, inputs: &'p PassInputs<'p>) -> Result<Self::Pass<'p>>;

    /// The logits of `pass` from a recording of an earlier pass of the same shape over the
    /// same cache `kv` (see [`Backend::record_pass`]), run again with this pass's inputs;
    /// `None` where the backend holds no recording for it, and the model then runs the pass's
    /// ops.
    fn replay_pass(
        &self,
        pass: &Self::Pass<'_>,
        kv: &Self::KvStorage,
    ) -> Result<Option<Self::Tensor>> {
        let _ = (pass, kv);
        Ok(None)
    }

    /// Whether the backend records the ops of `pass` that follow, instead of running them at
    /// once, so that [`Backend::replay_pass`] can run later passes of its shape with one
    /// call (a CUDA graph). The model asks only for passes that no observer watches.
    fn record_pass(&self, pass: &Self::Pass<'_>, kv: &Self::KvStorage) -> Result<bool> {
        let _ = (pass, kv);
        Ok(false)
    }

    /// Ends the recording begun by [`Backend::record_pass`] and runs it. `logits` is what the
    /// recorded ops returned. Gives the logits back once they are computed, or `None` when the
    /// recording could not be made (an op that a recording cannot hold): the model then runs
    /// the pass's ops again, unrecorded.
    fn finish_recording(
        &self,
        pass: &Self::Pass<'_>,
        logits: Result<Self::Tensor>,
    ) -> Result<Option<Self::Tensor>> {
        let _ = pass;
        logits.map(Some)
    }

    /// A tensor from host values, `[n_tokens × width]` row-major.
    fn upload(&self, n_tokens: usize, width: usize, values: Vec<f32>) -> Result<Self::Tensor>;

    /// A row-major host copy: the logits, and what an [`crate::Observer`] sees.
    fn to_host(&self, x: &Self::Tensor) -> Result<Vec<f32>>;

    /// Embedding lookup: row `token` of `table` (GGUF shape `[n_embd, n_vocab]`) for each
    /// token of the pass.
    fn embed(&self, table: &Self::Weight, pass: &Self::Pass<'_>) -> Result<Self::Tensor>;

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

    /// Rotates each `head_dim`-wide head of row `t` by the angles of the pass's position `t`.
    fn rope(
        &self,
        x: Self::Tensor,
        head_dim: usize,
        rope: &Rope,
        pass: &Self::Pass<'_>,
    ) -> Result<Self::Tensor>;

    /// Stores each token's K and V rows (`n_head_kv` heads each) of layer `layer` in the slot
    /// the pass gives it.
    fn store_kv(
        &self,
        k: &Self::Tensor,
        v: &Self::Tensor,
        kv: &mut Self::KvStorage,
        layer: usize,
        pass: &Self::Pass<'_>,
    ) -> Result<()>;

    /// Causal attention over the cache, whose keys and values for this pass's tokens are
    /// stored already: each token attends its `n_head` query heads over the positions of its
    /// own sequence up to its own, within the layer's sliding window if it has one, found
    /// through its sequence's block table. Query heads share KV heads in groups of
    /// `n_head / n_head_kv`. Returns `[n_tokens × n_head·head_dim_v]`.
    fn attention(
        &self,
        q: &Self::Tensor,
        kv: &Self::KvStorage,
        step: &AttentionStep,
        pass: &Self::Pass<'_>,
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

    /// The pass's output rows, in order (the rows whose logits are wanted).
    fn output_rows(&self, x: &Self::Tensor, pass: &Self::Pass<'_>) -> Result<Self::Tensor>;

    // Composites: default implementations from the primitives above, which a backend may
    // replace with fused kernels that give the same values.

    /// A projection with its optional bias.
    fn project(&self, x: &Self::Tensor, p: Projection<'_, Self::Weight>) -> Result<Self::Tensor> {
        let y = self.matmul(x, p.weight)?;
        match p.bias {
            Some(bias) => self.add_bias(y, bias),
            None => Ok(y),
        }
    }

    /// The Q, K and V projections of one input.
    fn qkv(
        &self,
        x: &Self::Tensor,
        q: Projection<'_, Self::Weight>,
        k: Projection<'_, Self::Weight>,
        v: Projection<'_, Self::Weight>,
    ) -> Result<[Self::Tensor; 3]> {
        Ok([
            self.project(x, q)?,
            self.project(x, k)?,
            self.project(x, v)?,
        ])
    }

    /// The gated feed-forward network.
    fn gated_ffn(
        &self,
        x: &Self::Tensor,
        ffn: &GatedFfnWeights<'_, Self::Weight>,
    ) -> Result<Self::Tensor> {
        let gate = self.project(x, ffn.gate)?;
        let up = self.project(x, ffn.up)?;
        let hidden = self.gated_activation(&gate, &up, ffn.activation)?;
        self.project(&hidden, ffn.down)
    }

    /// The mixture-of-experts FFN: each row is routed ([`crate::routing::route`]) to
    /// `n_used` experts, and their gated FFNs' outputs are summed, each times its weight, in
    /// order of the routing (as llama.cpp adds them). The default routes on the host and
    /// runs each expert once over the rows routed to it, with [`Self::gated_ffn`]; both CPU
    /// backends use it.
    fn moe_ffn(
        &self,
        x: &Self::Tensor,
        moe: &MoeFfnWeights<'_, Self::Weight>,
    ) -> Result<Self::Tensor> {
        let (n_tokens, width) = (x.n_tokens(), x.width());
        let logits = self.to_host(&self.matmul(x, moe.router)?)?;
        let routes: Vec<Vec<Route>> = logits
            .chunks_exact(moe.experts.len().max(1))
            .map(|row| route(row, moe.n_used))
            .collect();
        let rows = self.to_host(x)?;
        // Each token's expert outputs, already weighted, in order of its routing.
        let mut weighted = vec![vec![Vec::new(); moe.n_used]; n_tokens];
        for (e, expert) in moe.experts.iter().enumerate() {
            let picked: Vec<(usize, usize)> = routes
                .iter()
                .enumerate()
                .filter_map(|(t, r)| r.iter().position(|r| r.expert == e).map(|k| (t, k)))
                .collect();
            if picked.is_empty() {
                continue;
            }
            let input = picked
                .iter()
                .flat_map(|&(t, _)| rows[t * width..(t + 1) * width].iter().copied())
                .collect();
            let input = self.upload(picked.len(), width, input)?;
            let output = self.to_host(&self.gated_ffn(&input, expert)?)?;
            let out_width = output.len() / picked.len();
            for (row, &(t, k)) in output.chunks_exact(out_width).zip(&picked) {
                let w = routes[t][k].weight;
                weighted[t][k] = row.iter().map(|&v| v * w).collect();
            }
        }
        let out_width = weighted
            .first()
            .and_then(|w| w.first())
            .map_or(width, Vec::len);
        let mut out = vec![0.0f32; n_tokens * out_width];
        for (sum, outputs) in out.chunks_exact_mut(out_width.max(1)).zip(&weighted) {
            for output in outputs {
                for (s, &v) in sum.iter_mut().zip(output) {
                    *s += v;
                }
            }
        }
        self.upload(n_tokens, out_width, out)
    }

    /// A residual sum and its RMSNorm: `(a + b, rms_norm(a + b))`.
    fn add_rms_norm(
        &self,
        a: &Self::Tensor,
        b: &Self::Tensor,
        weight: &Self::Weight,
        eps: f32,
    ) -> Result<(Self::Tensor, Self::Tensor)> {
        let sum = self.add(a, b)?;
        let normed = self.rms_norm(&sum, weight, eps)?;
        Ok((sum, normed))
    }

    /// RoPE on Q and K, then K and V into the cache: returns the rotated Q and K.
    #[allow(clippy::too_many_arguments)]
    fn rope_store_kv(
        &self,
        q: Self::Tensor,
        k: Self::Tensor,
        v: &Self::Tensor,
        kv: &mut Self::KvStorage,
        layer: usize,
        head_dim: usize,
        rope: &Rope,
        pass: &Self::Pass<'_>,
    ) -> Result<(Self::Tensor, Self::Tensor)> {
        let q = self.rope(q, head_dim, rope, pass)?;
        let k = self.rope(k, head_dim, rope, pass)?;
        self.store_kv(&k, v, kv, layer, pass)?;
        Ok((q, k))
    }

    /// Soft-capping, `cap·tanh(x/cap)` elementwise (gemma2's final logits). The default
    /// computes it on the host, in f64 and rounded once; it runs once per pass.
    fn softcap(&self, x: Self::Tensor, cap: f32) -> Result<Self::Tensor> {
        let (n_tokens, width) = (x.n_tokens(), x.width());
        let cap = f64::from(cap);
        let values = self
            .to_host(&x)?
            .into_iter()
            .map(|v| (cap * (f64::from(v) / cap).tanh()) as f32)
            .collect();
        self.upload(n_tokens, width, values)
    }

    /// The `k` largest logits of each row, largest first (ties: the lower id first), as
    /// (token id, logit). A sampler that only looks at these (greedy decoding is `k = 1`)
    /// needs nothing else from the device.
    fn top_k(&self, logits: &Self::Tensor, k: usize) -> Result<Vec<Vec<(u32, f32)>>> {
        let width = logits.width();
        let values = self.to_host(logits)?;
        Ok(values
            .chunks_exact(width.max(1))
            .map(|row| crate::batch::top_k(row, k))
            .collect())
    }
}
