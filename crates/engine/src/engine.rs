//! The serving engine: a scheduler thread that owns the model and runs every admitted request
//! together, one forward pass per step, and the cheap, cloneable handle ([`Engine`]) through
//! which servers submit requests from any thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use web_time::Instant;

use plumb_model::{Backend, KvConfig, Model};
use plumb_tokenizer::Tokenizer;

use crate::metrics::{Metrics, MetricsSnapshot};
use crate::request::{Event, EventSink, Request};
use crate::sampling::{Sampler, SamplingConfig, SamplingError};
use crate::scheduler::{Job, RequestId, Scheduler, SchedulerConfig, StepOutput};
use crate::sequence::Limits;

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
    n_parallel: usize,
    max_queue: usize,
    next_id: AtomicU64,
    /// Taken on drop, so that the thread sees the channel close.
    sender: Option<Sender<Submission>>,
    thread: Option<JoinHandle<()>>,
}

/// A request on its way to the engine thread.
struct Submission {
    job: Job,
    sink: Box<dyn EventSink>,
}

impl Drop for Inner {
    /// Stops the thread and waits for it, so that the model's memory is free when the last
    /// handle is gone.
    fn drop(&mut self) {
        self.sender = None;
        if let Some(thread) = self.thread.take() {
            // A panic on the engine thread has already been reported by the panic hook.
            let _ = thread.join();
        }
    }
}

impl Engine {
    /// Starts the scheduler thread, which takes the model. Fails if the KV pool cannot be
    /// made.
    pub fn spawn<B: Backend + 'static>(
        model: Model<B>,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
    ) -> Result<Engine, crate::EngineError> {
        // Decoded tokens always fit in one pass, whatever the prompt budget. The pool holds
        // `kv_tokens` positions, shared by all sequences; admission keeps within it.
        let max_batch = config.step_tokens.max(config.n_parallel);
        let mut kv = KvConfig::new(config.n_ctx, config.n_parallel, max_batch);
        kv.n_blocks = config.kv_tokens.div_ceil(kv.block_size).max(1);
        let cache = model.new_kv_cache(kv)?;
        let metrics = Arc::new(Metrics::default());
        let n_vocab = model.hparams().n_vocab;
        let (sender, receiver) = mpsc::channel();
        let scheduler_config = SchedulerConfig {
            step_tokens: config.step_tokens,
            keep_finished: false,
        };
        let thread_metrics = Arc::clone(&metrics);
        let thread = std::thread::Builder::new()
            .name("plumb-engine".to_owned())
            .spawn(move || {
                let mut scheduler =
                    Scheduler::new(&model, &tokenizer, cache, scheduler_config, thread_metrics);
                serve(&mut scheduler, &receiver);
            })
            .map_err(crate::EngineError::Spawn)?;
        Ok(Engine {
            inner: Arc::new(Inner {
                metrics,
                n_ctx: config.n_ctx,
                n_vocab,
                n_parallel: config.n_parallel,
                max_queue: config.max_queue,
                next_id: AtomicU64::new(0),
                sender: Some(sender),
                thread: Some(thread),
            }),
        })
    }

    /// Queues a request; its events go to `sink`. Checks what the engine alone can check
    /// (prompt length, token ids, sampler settings) and refuses a full queue.
    pub fn submit(&self, request: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        let inner = &*self.inner;
        let samplers = self.check(&request)?;
        let metrics = &inner.metrics;
        // Reserve a place in the queue; the engine thread gives it back on admission.
        metrics
            .queue_depth
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued < inner.max_queue as u64).then_some(queued + 1)
            })
            .map_err(|queued| SubmitError::QueueFull {
                queued: queued as usize,
            })?;
        let job = Job {
            id: inner.next_id.fetch_add(1, Ordering::Relaxed),
            samplers,
            limits: Limits {
                max_tokens: request.max_tokens,
                stop: request.stop,
                ignore_eos: request.ignore_eos,
            },
            logprobs: request.logprobs,
            submitted: Instant::now(),
            prompt: request.prompt,
        };
        let n_prompt = job.prompt.len() as u64;
        let sent = inner
            .sender
            .as_ref()
            .is_some_and(|sender| sender.send(Submission { job, sink }).is_ok());
        if !sent {
            metrics.queue_depth.fetch_sub(1, Ordering::AcqRel);
            return Err(SubmitError::Stopped);
        }
        Metrics::add(&metrics.requests, 1);
        Metrics::add(&metrics.prompt_tokens, n_prompt);
        Ok(())
    }

    /// Validates a request and makes its choices' samplers (seeds `seed`, `seed + 1`, …).
    fn check(&self, request: &Request) -> Result<Vec<Sampler>, SubmitError> {
        let inner = &*self.inner;
        let invalid = |what: &str, reason: String| SubmitError::Invalid {
            what: what.to_owned(),
            reason,
        };
        if request.prompt.is_empty() {
            return Err(invalid("prompt", "is empty".to_owned()));
        }
        if request.prompt.len() + 1 > inner.n_ctx {
            return Err(SubmitError::PromptTooLong {
                n_prompt: request.prompt.len(),
                n_ctx: inner.n_ctx,
            });
        }
        if let Some((i, id)) = request
            .prompt
            .iter()
            .enumerate()
            .find(|(_, &id)| id as usize >= inner.n_vocab)
        {
            return Err(invalid(
                "prompt",
                format!(
                    "token {i} has id {id}, outside the vocabulary of {}",
                    inner.n_vocab
                ),
            ));
        }
        if request.n == 0 || request.n > inner.n_parallel {
            return Err(invalid(
                "n",
                format!(
                    "is {}; this server runs 1 to {} choices per request",
                    request.n, inner.n_parallel
                ),
            ));
        }
        (0..request.n)
            .map(|i| {
                let config = SamplingConfig {
                    seed: request.sampling.seed.wrapping_add(i as u32),
                    ..request.sampling.clone()
                };
                Sampler::new(config, inner.n_vocab).map_err(|err| {
                    let what = match &err {
                        SamplingError::Parameter { name, .. } => name,
                        SamplingError::BiasToken { .. } => "logit_bias",
                        _ => "sampling",
                    };
                    invalid(what, err.to_string())
                })
            })
            .collect()
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

    /// Sequences decoded together at most: the most choices one request may ask for.
    pub fn n_parallel(&self) -> usize {
        self.inner.n_parallel
    }
}

/// The engine thread: takes submissions, runs steps while there is work, and sleeps on the
/// channel when there is none. Returns when every handle is gone.
fn serve<B: Backend>(scheduler: &mut Scheduler<'_, B>, receiver: &Receiver<Submission>) {
    let mut sinks: HashMap<RequestId, Box<dyn EventSink>> = HashMap::new();
    let mut out = StepOutput::default();
    loop {
        let mut accept = |submission: Submission, scheduler: &mut Scheduler<'_, B>| {
            sinks.insert(submission.job.id, submission.sink);
            scheduler.submit(submission.job);
        };
        if scheduler.is_idle() {
            match receiver.recv() {
                Ok(submission) => accept(submission, scheduler),
                Err(_) => return,
            }
        }
        let mut open = true;
        loop {
            match receiver.try_recv() {
                Ok(submission) => accept(submission, scheduler),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        let waiting = scheduler.n_waiting();
        if !open {
            for (_, mut sink) in sinks.drain() {
                let _ = sink.send(Event::Failed {
                    message: SubmitError::Stopped.to_string(),
                });
            }
            return;
        }
        sinks.retain(|&id, sink| {
            let closed = sink.is_closed();
            if closed {
                scheduler.cancel(id);
            }
            !closed
        });
        scheduler.step(&mut out);
        for (id, event) in out.events.drain(..) {
            let Some(sink) = sinks.get_mut(&id) else {
                continue;
            };
            if sink.send(event).is_break() {
                scheduler.cancel(id);
                sinks.remove(&id);
            }
        }
        for (id, err) in out.failed.drain(..) {
            Metrics::add(&scheduler.metrics().requests_failed, 1);
            if let Some(mut sink) = sinks.remove(&id) {
                let _ = sink.send(Event::Failed {
                    message: err.to_string(),
                });
            }
        }
        for (id, _) in out.done.drain(..) {
            sinks.remove(&id);
        }
        let left = waiting - scheduler.n_waiting();
        scheduler
            .metrics()
            .queue_depth
            .fetch_sub(left as u64, Ordering::AcqRel);
    }
}
