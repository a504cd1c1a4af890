//! The generation loop: a prompt in, text streamed out piece by piece until a stop condition.
//!
//! A [`Session`] runs the engine's scheduler with one sequence, so that `plumb run` and
//! `plumb chat` generate exactly as the server does. It remembers the tokens its sequence
//! holds: a new prompt that starts with some of them evaluates only the rest, which is what
//! makes a chat cheap: each turn's prompt is the previous one plus the reply and the new
//! message.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use plumb_model::{Backend, KvConfig, Model};
use plumb_tokenizer::Tokenizer;

use crate::metrics::Metrics;
use crate::request::Event;
use crate::sampling::Sampler;
use crate::scheduler::{common_prefix, Job, Scheduler, SchedulerConfig, StepOutput};
use crate::sequence::Limits;
use crate::EngineError;

/// The sequence of the cache a session uses.
const SEQ: usize = 0;

/// Limits of one generation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Tokens to generate at most; `None` generates until another stop condition.
    pub max_tokens: Option<usize>,
    /// Text that ends the generation when it appears; it is not part of the output.
    pub stop: Vec<String>,
}

/// Why a generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token (EOS, end of turn).
    EndOfGeneration,
    /// `max_tokens` were generated.
    MaxTokens,
    /// A stop string appeared.
    StopString(String),
    /// Prompt and generated tokens fill the context.
    ContextFull,
    /// The caller's callback asked to stop.
    Interrupted,
}

impl StopReason {
    /// A short name for logs and JSON: `eog`, `length`, `stop`, `context`, `interrupted`.
    pub fn name(&self) -> &'static str {
        match self {
            StopReason::EndOfGeneration => "eog",
            StopReason::MaxTokens => "length",
            StopReason::StopString(_) => "stop",
            StopReason::ContextFull => "context",
            StopReason::Interrupted => "interrupted",
        }
    }
}

/// How a prompt was brought into the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PromptStats {
    /// Tokens of the prompt.
    pub n_tokens: usize,
    /// Leading tokens the cache already held.
    pub n_reused: usize,
    /// Tokens evaluated: `n_tokens - n_reused`.
    pub n_evaluated: usize,
}

/// Where the time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timings {
    /// Evaluating the prompt's new tokens.
    pub prompt_eval: Duration,
    /// Evaluating generated tokens, one forward pass each.
    pub decode: Duration,
    /// Forward passes of single generated tokens.
    pub n_decoded: usize,
    /// Running the sampler chain.
    pub sampling: Duration,
}

/// The result of one generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// Everything shown, without the stop string.
    pub text: String,
    /// The generated tokens, the end-of-generation token excluded.
    pub tokens: Vec<u32>,
    pub stop: StopReason,
    pub prompt: PromptStats,
    pub timings: Timings,
}

/// A model with one sequence of KV cache, and the tokens that cache holds.
pub struct Session<'m, B: Backend> {
    scheduler: Scheduler<'m, B>,
    /// Ids for the scheduler, one per generation.
    generations: u64,
}

impl<'m, B: Backend> Session<'m, B> {
    /// A session with a context of `n_ctx` tokens that evaluates prompts in batches of
    /// `batch` tokens.
    pub fn new(
        model: &'m Model<B>,
        tokenizer: &'m Tokenizer,
        n_ctx: usize,
        batch: usize,
    ) -> Result<Self, EngineError> {
        let batch = batch.min(n_ctx);
        let cache = model.new_kv_cache(KvConfig::new(n_ctx, 1, batch))?;
        let config = SchedulerConfig {
            step_tokens: batch,
            keep_finished: true,
        };
        // A session's numbers are in its `Generation`s; nobody reads these.
        let metrics = Arc::new(Metrics::default());
        Ok(Session {
            scheduler: Scheduler::new(model, tokenizer, cache, config, metrics),
            generations: 0,
        })
    }

    pub fn tokenizer(&self) -> &'m Tokenizer {
        self.scheduler.tokenizer()
    }

    pub fn n_ctx(&self) -> usize {
        self.scheduler.cache().n_ctx()
    }

    /// The tokens whose keys and values the cache holds, in order.
    pub fn cached_tokens(&self) -> &[u32] {
        self.scheduler.cache().seq_tokens(SEQ)
    }

    /// Cuts the cache back to the longest prefix of `prompt` it holds, short of the prompt's
    /// last token (whose logits are needed), and returns its length.
    fn keep_prefix(&mut self, prompt: &[u32]) -> usize {
        let common = common_prefix(self.cached_tokens(), prompt);
        let mut reuse = common.min(prompt.len() - 1);
        let cache = self.scheduler.cache_mut();
        if let Err(err) = cache.truncate(SEQ, reuse) {
            tracing::debug!(%err, "evaluating the prompt from the start");
            cache.clear_seq(SEQ);
            reuse = 0;
        }
        reuse
    }

    /// Generates a continuation of `prompt`. `on_text` gets each new piece of text (possibly
    /// empty) after every token and may stop the generation; pieces never split a
    /// character and never show a stop string.
    ///
    /// Prompt and generated tokens together never exceed the context: a prompt that leaves
    /// no room is an error, and a generation that fills the context stops with
    /// [`StopReason::ContextFull`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        sampler: &mut Sampler,
        options: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError> {
        let mut turn = self.start(prompt, sampler, options)?;
        loop {
            match self.advance(turn, sampler, &mut on_text)? {
                Progress::Running(next) => turn = next,
                Progress::Done(generation) => return Ok(generation),
            }
        }
    }

    /// Starts a generation that [`Session::advance`] runs one forward pass at a time, so that
    /// a caller that cannot block (a page's Web Worker) can take messages, such as a stop
    /// request, between tokens. Finish a turn before starting the next.
    pub fn start(
        &mut self,
        prompt: &[u32],
        sampler: &Sampler,
        options: &GenerateOptions,
    ) -> Result<Turn, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        let n_ctx = self.n_ctx();
        if prompt.len() >= n_ctx {
            return Err(EngineError::PromptTooLong {
                n_prompt: prompt.len(),
                n_ctx,
            });
        }
        let n_reused = self.keep_prefix(prompt);
        self.generations += 1;
        let id = self.generations;
        self.scheduler.submit(Job {
            id,
            prompt: prompt.to_vec(),
            samplers: vec![sampler.clone()],
            limits: Limits {
                max_tokens: options.max_tokens.unwrap_or(usize::MAX),
                stop: options.stop.clone(),
                ignore_eos: false,
            },
            logprobs: None,
            submitted: Instant::now(),
        });
        Ok(Turn {
            id,
            prompt: PromptStats {
                n_tokens: prompt.len(),
                n_reused,
                n_evaluated: prompt.len() - n_reused,
            },
            timings: Timings::default(),
            text: String::new(),
            tokens: Vec::new(),
            interrupted: false,
            stop: None,
            out: StepOutput::default(),
        })
    }

    /// Runs one forward pass of `turn` (a batch of its prompt, or one generated token) and
    /// gives `on_text` the new text, as [`Session::generate`] does. At the end, `sampler`
    /// becomes the sampler the generation left (its random state and penalty history).
    pub fn advance(
        &mut self,
        mut turn: Turn,
        sampler: &mut Sampler,
        mut on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Progress, EngineError> {
        let out = &mut turn.out;
        if turn.interrupted && turn.stop.is_none() {
            self.scheduler
                .finish(turn.id, &StopReason::Interrupted, out);
        } else {
            self.scheduler.step(out);
            let stats = out.stats;
            if stats.prompt_tokens > 0 {
                turn.timings.prompt_eval += stats.forward;
            } else {
                turn.timings.decode += stats.forward;
                turn.timings.n_decoded += 1;
            }
            turn.timings.sampling += stats.sampling;
        }
        for (_, event) in out.events.drain(..) {
            match event {
                Event::Token {
                    token, text: piece, ..
                } => {
                    turn.tokens.push(token);
                    turn.text.push_str(&piece);
                    turn.interrupted = turn.interrupted || on_text(&piece).is_break();
                }
                Event::Finished {
                    reason, text: rest, ..
                } => {
                    if !rest.is_empty() {
                        turn.text.push_str(&rest);
                        // The generation is over; the callback cannot stop it any more.
                        let _ = on_text(&rest);
                    }
                    // As in a loop that checks the callback right after a stop string
                    // and before every other limit.
                    turn.stop = Some(match reason {
                        StopReason::StopString(_) => reason,
                        _ if turn.interrupted => StopReason::Interrupted,
                        _ => reason,
                    });
                }
                Event::Prefilled { .. } | Event::Failed { .. } => {}
            }
        }
        if let Some((_, err)) = out.failed.pop() {
            return Err(err);
        }
        let Some((_, samplers)) = out.done.pop() else {
            return Ok(Progress::Running(turn));
        };
        if let Some(used) = samplers.into_iter().next() {
            *sampler = used;
        }
        Ok(Progress::Done(Generation {
            text: turn.text,
            tokens: turn.tokens,
            stop: turn.stop.unwrap_or(StopReason::Interrupted),
            prompt: turn.prompt,
            timings: turn.timings,
        }))
    }
}

/// A generation in progress: what [`Session::start`] begins and [`Session::advance`] runs.
pub struct Turn {
    id: u64,
    prompt: PromptStats,
    timings: Timings,
    text: String,
    tokens: Vec<u32>,
    /// The caller asked to stop; the next step finishes the generation.
    interrupted: bool,
    stop: Option<StopReason>,
    out: StepOutput,
}

impl Turn {
    /// Asks to stop: the next [`Session::advance`] ends the generation with
    /// [`StopReason::Interrupted`] (unless it has already ended for another reason).
    pub fn interrupt(&mut self) {
        self.interrupted = true;
    }

    /// The text generated so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The tokens generated so far.
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }
}

/// Where a [`Turn`] stands after one [`Session::advance`].
pub enum Progress {
    Running(Turn),
    Done(Generation),
}
