//! A loaded model on one backend: hyperparameters, weights, and the forward pass.

use std::path::Path;
use std::sync::Arc;

use plumb_gguf::{GgufFile, Metadata};

use crate::arch::gemma2::Gemma2;
use crate::arch::gemma3::Gemma3;
use crate::arch::llama::{Llama, LLAMA};
use crate::arch::phi3::Phi3;
use crate::arch::qwen2::QWEN2;
use crate::arch::qwen3::QWEN3;
use crate::arch::qwen3moe::QWEN3MOE;
use crate::backend::{Backend, PassInputs};
use crate::batch::{Batch, Logits, LogitsFor, TopLogits};
use crate::hparams::{Architecture, HyperParams};
use crate::kv_cache::{KvCache, KvConfig, KvLayout, LayerKv};
use crate::observer::Observer;
use crate::pass::Pass;
use crate::weights::WeightLoader;
use crate::{ModelError, Result};

pub struct Model<B: Backend> {
    backend: B,
    file: Arc<GgufFile>,
    hparams: HyperParams,
    decoder: Decoder<B>,
}

/// The forward passes plumb has; qwen2, qwen3 and qwen3moe run on the Llama decoder.
enum Decoder<B: Backend> {
    Llama(Llama<B>),
    Gemma2(Gemma2<B>),
    Gemma3(Gemma3<B>),
    Phi3(Phi3<B>),
}

impl<B: Backend> Model<B> {
    /// Opens a GGUF file and loads its weights onto `backend`.
    pub fn load(path: impl AsRef<Path>, backend: B) -> Result<Self> {
        let path = path.as_ref();
        let file = GgufFile::open(path).map_err(|error| ModelError::Open {
            path: path.to_owned(),
            error,
        })?;
        Self::from_file(Arc::new(file), backend)
    }

    pub fn from_file(file: Arc<GgufFile>, backend: B) -> Result<Self> {
        let hparams = HyperParams::from_gguf(&file)?;
        let mut loader = WeightLoader::new(&file, &backend);
        let decoder = match hparams.architecture {
            Architecture::Llama => Decoder::Llama(Llama::load(&mut loader, &hparams, &LLAMA)?),
            Architecture::Qwen2 => Decoder::Llama(Llama::load(&mut loader, &hparams, &QWEN2)?),
            Architecture::Qwen3 => Decoder::Llama(Llama::load(&mut loader, &hparams, &QWEN3)?),
            Architecture::Qwen3Moe => {
                Decoder::Llama(Llama::load(&mut loader, &hparams, &QWEN3MOE)?)
            }
            Architecture::Gemma2 => Decoder::Gemma2(Gemma2::load(&mut loader, &hparams)?),
            Architecture::Phi3 => Decoder::Phi3(Phi3::load(&mut loader, &hparams)?),
            Architecture::Gemma3 => Decoder::Gemma3(Gemma3::load(&mut loader, &hparams)?),
        };
        let unused = loader.unused();
        if !unused.is_empty() {
            return Err(ModelError::UnusedTensors {
                architecture: hparams.architecture.name(),
                tensors: unused.iter().map(|s| s.to_string()).collect(),
            });
        }
        Ok(Model {
            backend,
            file,
            hparams,
            decoder,
        })
    }

    pub fn hparams(&self) -> &HyperParams {
        &self.hparams
    }

    /// The file's metadata: the tokenizer and chat template live there.
    pub fn metadata(&self) -> &Metadata {
        self.file.metadata()
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// A KV cache for this model: its layers' shapes and sliding windows, at the given size.
    pub fn new_kv_cache(&self, config: KvConfig) -> Result<KvCache<B>> {
        for (name, value) in [
            ("n_ctx", config.n_ctx),
            ("n_seq", config.n_seq),
            ("max_batch", config.max_batch),
            ("n_blocks", config.n_blocks),
        ] {
            if value == 0 {
                return Err(ModelError::Batch(format!(
                    "KV cache {name} must be at least 1"
                )));
            }
        }
        if !config.block_size.is_power_of_two() {
            return Err(ModelError::Batch(format!(
                "KV cache block_size must be a power of two, not {}",
                config.block_size
            )));
        }
        if config.n_ctx > self.hparams.n_ctx_train {
            tracing::warn!(
                n_ctx = config.n_ctx,
                n_ctx_train = self.hparams.n_ctx_train,
                "context is longer than the model was trained for"
            );
        }
        let hp = &self.hparams;
        let layers = (0..hp.n_layer)
            .map(|il| {
                let window = match &self.decoder {
                    Decoder::Llama(_) | Decoder::Phi3(_) => None,
                    Decoder::Gemma2(g) => g.layer_window(il),
                    Decoder::Gemma3(g) => g.layer_window(il),
                };
                LayerKv::new(hp.n_head_kv, hp.head_dim_k, hp.head_dim_v, window)
            })
            .collect();
        let layout = KvLayout::new(&config, layers);
        // Block ids are u32, one value of which marks "no block"; a windowed group's pool is
        // sized from n_seq, not n_blocks, so every group is checked.
        if let Some(group) = layout
            .groups
            .iter()
            .find(|g| g.n_blocks >= u32::MAX as usize)
        {
            return Err(ModelError::Batch(format!(
                "a KV cache pool of {} blocks is too large: at most {} (fewer sequences or \
                 larger blocks)",
                group.n_blocks,
                u32::MAX - 1
            )));
        }
        let storage = self.backend.new_kv_storage(&layout)?;
        Ok(KvCache::new(layout, storage))
    }

    /// Runs one batch: stores its keys and values in `cache` and returns the logits its tokens
    /// asked for. The cache's sequences take the blocks the batch needs; when a pool has too
    /// few this fails with [`ModelError::KvPoolExhausted`] and the cache is unchanged.
    pub fn forward(&self, batch: &Batch, cache: &mut KvCache<B>) -> Result<Logits> {
        self.run(batch, cache, None, |logits| self.host_logits(batch, logits))
    }

    /// [`Model::forward`] that brings back only the `k` largest logits of each row the batch
    /// asked for, found by the backend where it computed them: for a sampler whose chain
    /// starts by keeping the top `k` (greedy decoding keeps 1), the rest of the vocabulary
    /// never needs to reach the host.
    pub fn forward_top_k(
        &self,
        batch: &Batch,
        cache: &mut KvCache<B>,
        k: usize,
    ) -> Result<TopLogits> {
        self.run(batch, cache, None, |logits| {
            Ok(TopLogits::new(
                batch.output_rows(),
                self.backend.top_k(logits, k)?,
            ))
        })
    }

    /// [`Model::forward`], showing every named intermediate to `observer`.
    pub fn forward_observed(
        &self,
        batch: &Batch,
        cache: &mut KvCache<B>,
        observer: &mut dyn Observer,
    ) -> Result<Logits> {
        self.run(batch, cache, Some(observer), |logits| {
            self.host_logits(batch, logits)
        })
    }

    /// Evaluates a run of tokens that continues sequence `seq`, in batches as large as the
    /// cache allows. Logits rows are indexed by position in `tokens`.
    pub fn eval(
        &self,
        cache: &mut KvCache<B>,
        seq: usize,
        tokens: &[u32],
        logits: LogitsFor,
    ) -> Result<Logits> {
        let mut rows = Vec::new();
        let mut values = Vec::new();
        let chunk_len = cache.layout().max_batch;
        for (c, chunk) in tokens.chunks(chunk_len).enumerate() {
            let start = c * chunk_len;
            let mut batch = Batch::new();
            for (i, &token) in chunk.iter().enumerate() {
                let index = start + i;
                let want = logits == LogitsFor::All || index + 1 == tokens.len();
                batch.push(token, seq, cache.seq_len(seq) + i, want);
            }
            let out = self.forward(&batch, cache)?;
            for row in batch.output_rows() {
                rows.push(start + row);
            }
            values.extend(out.rows().flatten());
        }
        Ok(Logits::new(self.hparams.n_vocab, rows, values))
    }

    fn host_logits(&self, batch: &Batch, logits: &B::Tensor) -> Result<Logits> {
        let values = self.backend.to_host(logits)?;
        Ok(Logits::new(
            self.hparams.n_vocab,
            batch.output_rows(),
            values,
        ))
    }

    /// One pass over `batch`; `output` takes the logits of the rows the batch asked for.
    fn run<T>(
        &self,
        batch: &Batch,
        cache: &mut KvCache<B>,
        observer: Option<&mut dyn Observer>,
        output: impl FnOnce(&B::Tensor) -> Result<T>,
    ) -> Result<T> {
        if let Some((i, &token)) = batch
            .tokens()
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= self.hparams.n_vocab)
        {
            return Err(ModelError::Batch(format!(
                "token {i} has id {token}, outside the vocabulary of {}",
                self.hparams.n_vocab
            )));
        }
        let output_rows = batch.output_rows();
        let n_ctx = cache.layout().n_ctx;
        cache.run_pass(
            &self.backend,
            batch.tokens(),
            batch.places(),
            |storage, kv| {
                let inputs = PassInputs::new(batch.tokens(), batch.places(), &output_rows, kv);
                let state = self.backend.begin_pass(&inputs)?;
                // A recorded pass (a CUDA graph) shows no intermediates, so one that is
                // observed always runs op by op.
                if observer.is_none() {
                    if let Some(logits) = self.backend.replay_pass(&state, storage)? {
                        return output(&logits);
                    }
                    if self.backend.record_pass(&state, storage)? {
                        let logits = self.decode(&state, storage, n_ctx, None);
                        if let Some(logits) = self.backend.finish_recording(&state, logits)? {
                            return output(&logits);
                        }
                    }
                }
                // The observer's own lifetime is shortened to the pass's.
                let observer = observer.map(|o| &mut *o as &mut dyn Observer);
                output(&self.decode(&state, storage, n_ctx, observer)?)
            },
        )
    }

    /// The architecture's ops over one pass: the logits of the rows the batch asked for.
    fn decode<'a, 'p>(
        &'a self,
        state: &'a B::Pass<'p>,
        storage: &'a mut B::KvStorage,
        n_ctx: usize,
        observer: Option<&'a mut dyn Observer>,
    ) -> Result<B::Tensor> {
        let mut pass = Pass::new(&self.backend, state, storage, n_ctx, observer);
        match &self.decoder {
            Decoder::Llama(d) => d.forward(&mut pass),
            Decoder::Gemma2(d) => d.forward(&mut pass),
            Decoder::Gemma3(d) => d.forward(&mut pass),
            Decoder::Phi3(d) => d.forward(&mut pass),
        }
    }
}
