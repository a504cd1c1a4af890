//! The serving engine: a scheduler thread that owns the model and runs every admitted request
//! together, one forward pass per step, and the cheap, cloneable handle ([`Engine`]) through
//! which servers submit requests from any thread.

use std::sync::Arc;

use plumb_model::{Backend, Model};
use plumb_tokenizer::Tokenizer;

use crate::metrics::{Metrics, MetricsSnapshot};
use crate::request::{EventSink, Request};

/// How the engine runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Sequences decoded together at most (`-np/--parallel`); a request with `n` choices
    /// takes `n` of them.
    pub n_parallel: usize,
    /// Positions one sequence may hold, prompt and generated tokens together (`--ctx-size`).
    pub n_ctx: usize,
    /// Tokens of KV cache the block pool holds, all sequences together.
    pub kv_tokens: usize,
    /// Prompt tokens (and decoded tokens) evaluated in one step at most.
    pub step_tokens: usize,
    /// Requests waiting for admission at most; more are refused with [`SubmitError::QueueFull`].
    pub max_queue: usize,
}

/// Why a request was not accepted. Nothing was queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    #[error("the server is busy: {queued} requests are waiting; try again later")]
    QueueFull { queued: usize },
    #[error(
        "the prompt is {n_prompt} tokens, and a context of {n_ctx} has room for at most {} \
         prompt tokens plus one generated token",
        n_ctx.saturating_sub(1)
    )]
    PromptTooLong { n_prompt: usize, n_ctx: usize },
    #[error("{what}: {reason}")]
    Invalid { what: String, reason: String },
    #[error("the engine has stopped")]
    Stopped,
}

/// A handle on a running engine. Clones share the engine; dropping the last one stops it.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    metrics: Arc<Metrics>,
    n_ctx: usize,
    n_vocab: usize,
}

impl Engine {
    /// Starts the scheduler thread, which takes the model. Fails if the KV pool cannot be
    /// made.
    pub fn spawn<B: Backend + 'static>(
        model: Model<B>,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
    ) -> Result<Engine, crate::EngineError> {
        let _ = (model, tokenizer, config);
        todo!("the scheduler")
    }

    /// Queues a request; its events go to `sink`. Checks what the engine alone can check
    /// (prompt length, token ids, sampler settings) and refuses a full queue.
    pub fn submit(&self, request: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        let _ = (request, sink);
        todo!("the scheduler")
    }

    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// Positions one sequence may hold.
    pub fn n_ctx(&self) -> usize {
        self.inner.n_ctx
    }

    pub fn n_vocab(&self) -> usize {
        self.inner.n_vocab
    }
}
