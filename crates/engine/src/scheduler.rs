//! Continuous batching: every running request advances in one forward pass per step.
//!
//! A step admits waiting requests while sequence ids and KV blocks allow, then builds one
//! batch of one token for each decoding sequence followed by prompt chunks of prefilling
//! sequences, up to a token budget. A long prompt is thus spread over several steps and never
//! stalls running streams for more than one. After the pass, every sequence whose logits came
//! back samples its next token, and finished requests give their sequences back.
//!
//! The scheduler does not talk to clients: it reports events per request id, and its owner (the
//! engine thread, or a [`crate::Session`]) delivers them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plumb_model::{Backend, Batch, KvCache, Logits, Model, TopLogits};
use plumb_tokenizer::Tokenizer;

use crate::logprobs::token_logprob;
use crate::metrics::Metrics;
use crate::request::{Event, TokenLogprob};
use crate::sampling::{Sampler, SamplingError};
use crate::sequence::{Limits, Sequence};
use crate::token_rate::TokenRate;
use crate::{EngineError, StopReason};

pub(crate) type RequestId = u64;

/// A request as the scheduler runs it: validated, with one sampler per choice.
pub(crate) struct Job {
    pub id: RequestId,
    /// Never empty, and shorter than the context.
    pub prompt: Vec<u32>,
    /// One per choice, each with its own seed.
    pub samplers: Vec<Sampler>,
    pub limits: Limits,
    pub logprobs: Option<usize>,
    /// When the request arrived: the time to first token counts from here.
    pub submitted: Instant,
}

/// What one call of [`Scheduler::step`] (or [`Scheduler::finish`]) produced, in order.
#[derive(Default)]
pub(crate) struct StepOutput {
    pub events: Vec<(RequestId, Event)>,
    /// Requests that ended normally, every choice finished, with their samplers.
    pub done: Vec<(RequestId, Vec<Sampler>)>,
    /// Requests that ended with an error; their sequences are gone.
    pub failed: Vec<(RequestId, EngineError)>,
    pub stats: StepStats,
}

/// Where a step's time went.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StepStats {
    /// Prompt tokens evaluated.
    pub prompt_tokens: usize,
    /// Generated tokens evaluated.
    pub decode_tokens: usize,
    pub forward: Duration,
    pub sampling: Duration,
}

/// How a scheduler runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SchedulerConfig {
    /// Tokens per forward pass at most, decoded and prompt tokens together (at least one
    /// prompt token goes in when any sequence is prefilling, so prompts always progress).
    pub step_tokens: usize,
    /// Leave a finished sequence's positions in the cache instead of clearing it. A
    /// [`crate::Session`] has one sequence and continues from what it holds.
    pub keep_finished: bool,
}

pub(crate) struct Scheduler<'m, B: Backend> {
    model: &'m Model<B>,
    tokenizer: &'m Tokenizer,
    cache: KvCache<B>,
    config: SchedulerConfig,
    metrics: Arc<Metrics>,
    waiting: VecDeque<Job>,
    /// In admission order, which is also the order prompts get the step's budget.
    running: Vec<Running<'m>>,
    free_seqs: Vec<usize>,
    /// Blocks promised to running requests: the most their sequences can hold together.
    reserved: usize,
    rate: TokenRate,
}

struct Running<'t> {
    id: RequestId,
    prompt: Vec<u32>,
    choices: Vec<Choice<'t>>,
    reserved: usize,
    /// Prompt tokens that were already in the cache.
    cached: usize,
    submitted: Instant,
    /// Whether the request got its first token (or ended without one): the TTFT is taken.
    answered: bool,
    failure: Option<EngineError>,
}

struct Choice<'t> {
    seq: usize,
    state: Sequence<'t>,
    phase: Phase,
    logprobs: Option<usize>,
    /// The logits row of this step's pass that this choice samples from.
    row: Option<usize>,
    sampled: Option<Result<(u32, Option<TokenLogprob>), SamplingError>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A choice after the first, waiting for the first choice's prompt to fork from.
    AwaitFork,
    /// Evaluating the prompt from position `next`.
    Prefill {
        next: usize,
    },
    /// `token` was sampled and is evaluated at the next step.
    Decode {
        token: u32,
    },
    Finished,
}

impl<'m, B: Backend> Scheduler<'m, B> {
    pub fn new(
        model: &'m Model<B>,
        tokenizer: &'m Tokenizer,
        cache: KvCache<B>,
        config: SchedulerConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Scheduler {
            model,
            tokenizer,
            free_seqs: (0..cache.n_seq()).rev().collect(),
            cache,
            config,
            metrics,
            waiting: VecDeque::new(),
            running: Vec::new(),
            reserved: 0,
            rate: TokenRate::default(),
        }
    }

    pub fn tokenizer(&self) -> &'m Tokenizer {
        self.tokenizer
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn cache(&self) -> &KvCache<B> {
        &self.cache
    }

    pub fn cache_mut(&mut self) -> &mut KvCache<B> {
        &mut self.cache
    }

    /// Nothing waits and nothing runs.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub fn n_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Queues a request. With `keep_finished`, the first free sequence may still hold
    /// positions; they must be a prefix of the job's prompt shorter than it.
    pub fn submit(&mut self, job: Job) {
        self.waiting.push_back(job);
    }

    /// Drops a request, waiting or running, without a word: its client is gone.
    pub fn cancel(&mut self, id: RequestId) {
        if let Some(at) = self.waiting.iter().position(|job| job.id == id) {
            self.waiting.remove(at);
        } else if let Some(at) = self.running.iter().position(|r| r.id == id) {
            let running = self.running.remove(at);
            self.release(running, true);
        }
        self.update_gauges();
    }

    /// Ends every choice of a running request now, with `reason` (a client's interruption).
    pub fn finish(&mut self, id: RequestId, reason: &StopReason, out: &mut StepOutput) {
        let Some(at) = self.running.iter().position(|r| r.id == id) else {
            return;
        };
        let mut running = self.running.remove(at);
        for (i, choice) in running.choices.iter_mut().enumerate() {
            if choice.phase != Phase::Finished {
                finish_choice(id, i, choice, reason.clone(), out);
            }
        }
        let samplers = self.release(running, false);
        out.done.push((id, samplers));
        self.update_gauges();
    }

    /// One step: admit, one forward pass, sample, finish. Appends to `out` and sets its stats.
    pub fn step(&mut self, out: &mut StepOutput) {
        out.stats = StepStats::default();
        self.admit(out);
        let (batch, n_decode) = self.build_batch();
        if !batch.is_empty() {
            let start = Instant::now();
            let result = match self.top_logits_needed() {
                Some(k) => self
                    .model
                    .forward_top_k(&batch, &mut self.cache, k)
                    .map(StepLogits::Top),
                None => self
                    .model
                    .forward(&batch, &mut self.cache)
                    .map(StepLogits::All),
            };
            out.stats.forward = start.elapsed();
            out.stats.decode_tokens = n_decode;
            out.stats.prompt_tokens = batch.len() - n_decode;
            match result {
                Ok(logits) => self.advance(&logits, out),
                Err(err) => {
                    // The cache's state for these sequences is unknown: drop them all.
                    let message = err.to_string();
                    for r in &mut self.running {
                        r.failure = Some(EngineError::Model(plumb_model::ModelError::Batch(
                            message.clone(),
                        )));
                    }
                }
            }
        }
        self.retire(out);
        self.update_gauges();
    }

    /// `k` when every running choice samples from at most the top `k` logits of its row and
    /// wants no log-probabilities: the step then brings back only those from the backend.
    fn top_logits_needed(&self) -> Option<usize> {
        self.running
            .iter()
            .flat_map(|r| &r.choices)
            .filter(|c| c.phase != Phase::Finished)
            .try_fold(0, |k, c| match c.logprobs {
                Some(_) => None,
                None => c.state.needs_only_top().map(|n| k.max(n)),
            })
    }

    /// Admits waiting requests in order while sequence ids and blocks allow (no preemption:
    /// each choice reserves the most blocks it can ever hold).
    fn admit(&mut self, out: &mut StepOutput) {
        let total = self.cache.total_blocks();
        while let Some(job) = self.waiting.front() {
            let n = job.samplers.len();
            let longest = job
                .prompt
                .len()
                .saturating_add(job.limits.max_tokens)
                .min(self.cache.n_ctx());
            let need = self.cache.blocks_needed(longest) * n;
            if need > total {
                let job = self.waiting.pop_front().expect("looked at the front");
                out.failed
                    .push((job.id, EngineError::KvPool { need, total }));
                continue;
            }
            if n > self.free_seqs.len()
                || self.reserved + need > total
                || self.prefix_in_flight(&job.prompt)
            {
                break;
            }
            let job = self.waiting.pop_front().expect("looked at the front");
            self.reserved += need;
            let seqs = self.free_seqs.split_off(self.free_seqs.len() - n);
            let first = seqs[0];
            for &seq in &seqs[1..] {
                self.cache.clear_seq(seq);
            }
            let held = self.cache.seq_len(first);
            let cached = if held > 0 {
                held
            } else {
                self.cache.reuse_prefix(first, &job.prompt)
            };
            Metrics::add(&self.metrics.cached_prompt_tokens, cached as u64);
            if cached > 0 {
                Metrics::add(&self.metrics.prefix_cache_hits, 1);
            }
            let n_ctx = self.cache.n_ctx();
            let choices = job
                .samplers
                .into_iter()
                .zip(seqs)
                .enumerate()
                .map(|(i, (sampler, seq))| Choice {
                    seq,
                    state: Sequence::new(self.tokenizer, sampler, &job.prompt, &job.limits, n_ctx),
                    phase: if i == 0 {
                        Phase::Prefill { next: cached }
                    } else {
                        Phase::AwaitFork
                    },
                    logprobs: job.logprobs,
                    row: None,
                    sampled: None,
                })
                .collect();
            self.running.push(Running {
                id: job.id,
                prompt: job.prompt,
                choices,
                reserved: need,
                cached,
                submitted: job.submitted,
                answered: false,
                failure: None,
            });
        }
    }

    /// Whether a running request is still evaluating whole blocks that `prompt` starts with.
    /// Such a prompt waits for them to reach the prefix cache, so that requests arriving
    /// together with a shared prefix (a system prompt) compute it once, not once each.
    fn prefix_in_flight(&self, prompt: &[u32]) -> bool {
        let block = self.cache.block_size();
        self.running.iter().any(|r| {
            let Some(Phase::Prefill { next }) = r.choices.first().map(|c| c.phase) else {
                return false;
            };
            let common = r
                .prompt
                .iter()
                .zip(prompt)
                .take_while(|(a, b)| a == b)
                .count();
            // The last prompt token is always evaluated, so reuse stops before it.
            let reusable = common.min(prompt.len() - 1) / block * block;
            next < reusable
        })
    }

    /// The step's batch: every decoding sequence's token, then prompt chunks in admission
    /// order within the budget. Marks which choices get a logits row. Returns the batch and
    /// how many of its tokens are decoded ones.
    fn build_batch(&mut self) -> (Batch, usize) {
        let mut batch = Batch::new();
        let mut rows = 0;
        let mut prefilling = false;
        for choice in self.running.iter_mut().flat_map(|r| &mut r.choices) {
            match choice.phase {
                Phase::Decode { token } => {
                    batch.push(token, choice.seq, self.cache.seq_len(choice.seq), true);
                    choice.row = Some(rows);
                    rows += 1;
                }
                Phase::Prefill { .. } => prefilling = true,
                Phase::AwaitFork | Phase::Finished => {}
            }
        }
        let n_decode = batch.len();
        if !prefilling {
            return (batch, n_decode);
        }
        let mut budget = self.config.step_tokens.saturating_sub(n_decode).max(1);
        for r in &mut self.running {
            for choice in &mut r.choices {
                let Phase::Prefill { next } = &mut choice.phase else {
                    continue;
                };
                if budget == 0 {
                    return (batch, n_decode);
                }
                let end = r.prompt.len().min(*next + budget);
                for pos in *next..end {
                    batch.push(r.prompt[pos], choice.seq, pos, pos + 1 == r.prompt.len());
                }
                budget -= end - *next;
                *next = end;
                if end == r.prompt.len() {
                    choice.row = Some(rows);
                    rows += 1;
                }
            }
        }
        (batch, n_decode)
    }

    /// After a pass: forks finished prompts, samples every choice with a row, and emits.
    fn advance(&mut self, logits: &StepLogits, out: &mut StepOutput) {
        for r in &mut self.running {
            let first = &r.choices[0];
            let prompt_done = matches!(first.phase, Phase::Prefill { .. }) && first.row.is_some();
            if !prompt_done {
                continue;
            }
            out.events.push((
                r.id,
                Event::Prefilled {
                    prompt_tokens: r.prompt.len(),
                    cached_tokens: r.cached,
                },
            ));
            let (src, row) = (first.seq, first.row);
            for choice in &mut r.choices[1..] {
                if choice.phase != Phase::AwaitFork {
                    continue;
                }
                match self.cache.fork(src, choice.seq) {
                    // Shares the prompt's blocks, and its logits.
                    Ok(()) => choice.row = row,
                    Err(err) => {
                        tracing::debug!(%err, "evaluating the prompt again for another choice");
                        let next = self.cache.reuse_prefix(choice.seq, &r.prompt);
                        choice.phase = Phase::Prefill { next };
                    }
                }
            }
        }

        let start = Instant::now();
        let mut work: Vec<&mut Choice<'m>> = self
            .running
            .iter_mut()
            .flat_map(|r| &mut r.choices)
            .filter(|c| c.row.is_some() && !c.state.is_exhausted())
            .collect();
        sample_all(&mut work, logits);
        out.stats.sampling = start.elapsed();

        let mut generated = 0;
        for r in &mut self.running {
            for (i, choice) in r.choices.iter_mut().enumerate() {
                if choice.row.take().is_none() || r.failure.is_some() {
                    continue;
                }
                if !r.answered {
                    r.answered = true;
                    self.metrics
                        .observe_ttft(r.submitted.elapsed().as_secs_f64());
                }
                let (token, logprob) = match choice.sampled.take() {
                    None => {
                        finish_choice(r.id, i, choice, StopReason::MaxTokens, out);
                        continue;
                    }
                    Some(Err(err)) => {
                        r.failure = Some(err.into());
                        continue;
                    }
                    Some(Ok(sampled)) => sampled,
                };
                let pushed = match choice.state.push(token) {
                    Ok(pushed) => pushed,
                    Err(err) => {
                        r.failure = Some(err.into());
                        continue;
                    }
                };
                if let Some(text) = pushed.text {
                    generated += 1;
                    out.events.push((
                        r.id,
                        Event::Token {
                            choice: i,
                            token,
                            text,
                            logprob,
                        },
                    ));
                }
                match pushed.stop {
                    Some(reason) => finish_choice(r.id, i, choice, reason, out),
                    None => choice.phase = Phase::Decode { token },
                }
            }
        }
        Metrics::add(&self.metrics.generated_tokens, generated as u64);
        let rate = self.rate.record(start, generated);
        self.metrics.set_tokens_per_second(rate);
    }

    /// Removes failed and finished requests.
    fn retire(&mut self, out: &mut StepOutput) {
        let mut i = 0;
        while i < self.running.len() {
            let r = &mut self.running[i];
            if let Some(err) = r.failure.take() {
                let running = self.running.remove(i);
                out.failed.push((running.id, err));
                self.release(running, true);
            } else if r.choices.iter().all(|c| c.phase == Phase::Finished) {
                let running = self.running.remove(i);
                let id = running.id;
                let samplers = self.release(running, false);
                out.done.push((id, samplers));
            } else {
                i += 1;
            }
        }
        if self.running.is_empty() {
            self.rate.reset();
            self.metrics.set_tokens_per_second(0.0);
        }
    }

    /// Gives a request's sequences and reservation back.
    fn release(&mut self, running: Running<'m>, failed: bool) -> Vec<Sampler> {
        self.reserved -= running.reserved;
        let mut samplers = Vec::with_capacity(running.choices.len());
        // Pushed back in reverse so that the next request takes the same ids in order.
        for choice in running.choices.into_iter().rev() {
            if failed || !self.config.keep_finished {
                self.cache.clear_seq(choice.seq);
            }
            self.free_seqs.push(choice.seq);
            samplers.push(choice.state.into_sampler());
        }
        samplers.reverse();
        samplers
    }

    fn update_gauges(&self) {
        let active = self
            .running
            .iter()
            .flat_map(|r| &r.choices)
            .filter(|c| c.phase != Phase::Finished)
            .count();
        Metrics::set(&self.metrics.active_sequences, active as u64);
        Metrics::set(
            &self.metrics.kv_blocks_used,
            self.cache.used_blocks() as u64,
        );
        Metrics::set(
            &self.metrics.kv_blocks_free,
            self.cache.free_blocks() as u64,
        );
    }
}

/// How many leading tokens `a` and `b` share.
pub(crate) fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Ends one choice: the text it held back, then its `Finished` event.
fn finish_choice(
    id: RequestId,
    index: usize,
    choice: &mut Choice<'_>,
    reason: StopReason,
    out: &mut StepOutput,
) {
    let text = choice.state.finish(&reason);
    out.events.push((
        id,
        Event::Finished {
            choice: index,
            reason,
            text,
            completion_tokens: choice.state.generated().len(),
        },
    ));
    choice.phase = Phase::Finished;
}

/// Samples every choice of `work` from its logits row. On one thread: the backend's pool
/// keeps every core spinning for a moment after a pass, and a second sampling thread measured
/// slower than one (qwen2.5-0.5b, 8 sequences, 2 cores: 4.0 ms against 3.6 ms a step).
fn sample_all(work: &mut [&mut Choice<'_>], logits: &StepLogits) {
    for choice in work {
        let Some(row) = choice.row else { continue };
        choice.sampled = Some(match logits {
            StepLogits::All(logits) => {
                let row = logits.row(row);
                let k = choice.logprobs;
                choice
                    .state
                    .sample(row)
                    .map(|token| (token, k.map(|k| token_logprob(row, token, k))))
            }
            // Only chosen when no choice wants log-probabilities.
            StepLogits::Top(top) => choice.state.sample_top(top.row(row)).map(|t| (t, None)),
        });
    }
}

/// What a step's forward pass brought back for the rows it sampled.
enum StepLogits {
    All(Logits),
    Top(TopLogits),
}
