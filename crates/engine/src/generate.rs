//! The generation loop: a prompt in, text streamed out piece by piece until a stop condition.
//!
//! A [`Session`] owns one sequence of KV cache and remembers the tokens it holds. A new
//! prompt that starts with some of them evaluates only the rest, which is what makes a chat
//! cheap: each turn's prompt is the previous one plus the reply and the new message.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use plumb_model::{Backend, KvCache, KvConfig, Logits, LogitsFor, Model};
use plumb_tokenizer::Tokenizer;

use crate::sampling::Sampler;
use crate::stop::{StopMatcher, StopScan};
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
    model: &'m Model<B>,
    tokenizer: &'m Tokenizer,
    cache: KvCache<B>,
    cached: Vec<u32>,
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
        let cache = model.new_kv_cache(KvConfig::new(n_ctx, 1, batch.min(n_ctx)))?;
        Ok(Session {
            model,
            tokenizer,
            cache,
            cached: Vec::new(),
        })
    }

    pub fn tokenizer(&self) -> &'m Tokenizer {
        self.tokenizer
    }

    pub fn n_ctx(&self) -> usize {
        self.cache.n_ctx()
    }

    /// The tokens whose keys and values the cache holds, in order.
    pub fn cached_tokens(&self) -> &[u32] {
        &self.cached
    }

    /// Brings `prompt` into the cache, evaluating only what follows the longest prefix the
    /// cache already holds, and returns the next-token logits.
    fn prefill(&mut self, prompt: &[u32]) -> Result<(Vec<f32>, PromptStats), EngineError> {
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        // The last prompt token is evaluated again even when cached: its logits are needed.
        let mut reuse = common.min(prompt.len() - 1);
        if let Err(err) = self.cache.truncate(SEQ, reuse) {
            tracing::debug!(%err, "evaluating the prompt from the start");
            self.cache.clear_seq(SEQ);
            reuse = 0;
        }
        self.cached.truncate(reuse);
        let logits = self.eval(&prompt[reuse..])?;
        let last = logits.last().map(<[f32]>::to_vec).unwrap_or_default();
        let stats = PromptStats {
            n_tokens: prompt.len(),
            n_reused: reuse,
            n_evaluated: prompt.len() - reuse,
        };
        Ok((last, stats))
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
        let mut timings = Timings::default();
        let start = Instant::now();
        let (mut logits, prompt_stats) = self.prefill(prompt)?;
        timings.prompt_eval = start.elapsed();

        sampler.start(prompt);
        let mut decoder = self.tokenizer.stream_decoder();
        let mut stops = StopMatcher::new(options.stop.iter().cloned());
        let mut text = String::new();
        let mut tokens = Vec::new();
        let stop = loop {
            if options.max_tokens == Some(tokens.len()) {
                break StopReason::MaxTokens;
            }
            let start = Instant::now();
            let token = sampler.sample(&logits)?;
            sampler.accept(token);
            timings.sampling += start.elapsed();
            if self.tokenizer.is_end_of_generation(token) {
                break StopReason::EndOfGeneration;
            }
            tokens.push(token);
            let piece = decoder.push(token)?;
            let (emit, stopped) = match stops.push(&piece) {
                StopScan::Continue { emit } => (emit, None),
                StopScan::Stop { emit, stop } => (emit, Some(stop)),
            };
            text.push_str(&emit);
            let flow = on_text(&emit);
            if let Some(stop) = stopped {
                break StopReason::StopString(stop);
            }
            if flow.is_break() {
                break StopReason::Interrupted;
            }
            if options.max_tokens == Some(tokens.len()) {
                break StopReason::MaxTokens;
            }
            if prompt.len() + tokens.len() >= n_ctx {
                break StopReason::ContextFull;
            }
            let start = Instant::now();
            logits = self.decode(token)?;
            timings.decode += start.elapsed();
            timings.n_decoded += 1;
        };
        if !matches!(stop, StopReason::StopString(_)) {
            // Bytes of an unfinished character, and text held back as a possible stop string.
            let mut rest = match stops.push(&decoder.flush()) {
                StopScan::Continue { emit } => emit,
                StopScan::Stop { emit, .. } => emit,
            };
            rest.push_str(&stops.finish());
            if !rest.is_empty() {
                text.push_str(&rest);
                // The generation is over; the callback cannot stop it any more.
                let _ = on_text(&rest);
            }
        }
        Ok(Generation {
            text,
            tokens,
            stop,
            prompt: prompt_stats,
            timings,
        })
    }

    /// Evaluates one generated token and returns the logits after it.
    fn decode(&mut self, token: u32) -> Result<Vec<f32>, EngineError> {
        let logits = self.eval(&[token])?;
        Ok(logits.last().map(<[f32]>::to_vec).unwrap_or_default())
    }

    /// Evaluates tokens that continue the cached ones. A failure may leave part of them in
    /// the cache, so it forgets everything rather than guess.
    fn eval(&mut self, tokens: &[u32]) -> Result<Logits, EngineError> {
        match self
            .model
            .eval(&mut self.cache, SEQ, tokens, LogitsFor::Last)
        {
            Ok(logits) => {
                self.cached.extend_from_slice(tokens);
                Ok(logits)
            }
            Err(err) => {
                self.cache.clear_seq(SEQ);
                self.cached.clear();
                Err(err.into())
            }
        }
    }
}
