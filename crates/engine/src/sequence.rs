//! One generated continuation, apart from the model call: its sampler, its stop strings, its
//! text decoder and its limits. The scheduler keeps one per running choice and feeds it the
//! logits of each step; the model pass that produces them is not its business.

use plumb_tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

use crate::generate::StopReason;
use crate::sampling::{Sampler, SamplingError};
use crate::stop::{StopMatcher, StopScan};

/// When a continuation ends, besides stop strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Tokens to generate at most.
    pub max_tokens: usize,
    /// Text that ends the continuation when it appears; never shown.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
}

/// What one sampled token did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pushed {
    /// Text to show now (possibly empty); `None` for an end-of-generation token, which is not
    /// part of the output.
    pub text: Option<String>,
    /// Set when the continuation is over.
    pub stop: Option<StopReason>,
}

/// The state of one continuation of a prompt.
pub(crate) struct Sequence<'t> {
    tokenizer: &'t Tokenizer,
    sampler: Sampler,
    decoder: StreamDecoder<'t>,
    stops: StopMatcher,
    max_tokens: usize,
    ignore_eos: bool,
    /// Positions the context has room for: prompt and generated tokens together.
    n_ctx: usize,
    n_prompt: usize,
    generated: Vec<u32>,
}

impl<'t> Sequence<'t> {
    /// A continuation of `prompt`; the sampler's penalties start from the prompt.
    pub fn new(
        tokenizer: &'t Tokenizer,
        mut sampler: Sampler,
        prompt: &[u32],
        limits: &Limits,
        n_ctx: usize,
    ) -> Self {
        sampler.start(prompt);
        Sequence {
            tokenizer,
            sampler,
            decoder: tokenizer.stream_decoder(),
            stops: StopMatcher::new(limits.stop.iter().cloned()),
            max_tokens: limits.max_tokens,
            ignore_eos: limits.ignore_eos,
            n_ctx,
            n_prompt: prompt.len(),
            generated: Vec::new(),
        }
    }

    /// Whether no token may be generated at all (`max_tokens` is 0).
    pub fn is_exhausted(&self) -> bool {
        self.generated.len() >= self.max_tokens
    }

    /// Draws the next token from the logits after the last evaluated one: the part of a
    /// step that costs O(vocabulary).
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        let token = self.sampler.sample(logits)?;
        self.sampler.accept(token);
        Ok(token)
    }

    /// How many of a row's largest logits [`Sequence::sample_top`] needs, when it can do
    /// without the others (see [`Sampler::needs_only_top`]).
    pub fn needs_only_top(&self) -> Option<usize> {
        self.sampler.needs_only_top()
    }

    /// [`Sequence::sample`] from a row's largest logits.
    pub fn sample_top(&mut self, top: &[(u32, f32)]) -> Result<u32, SamplingError> {
        let token = self.sampler.sample_top(top)?;
        self.sampler.accept(token);
        Ok(token)
    }

    /// Takes a sampled token: its text, and whether the continuation ends with it. Checks, in
    /// order, end of generation, stop strings, `max_tokens` and the context.
    pub fn push(&mut self, token: u32) -> Result<Pushed, TokenizerError> {
        if !self.ignore_eos && self.tokenizer.is_end_of_generation(token) {
            return Ok(Pushed {
                text: None,
                stop: Some(StopReason::EndOfGeneration),
            });
        }
        self.generated.push(token);
        let piece = self.decoder.push(token)?;
        let (text, stop) = match self.stops.push(&piece) {
            StopScan::Continue { emit } => (emit, None),
            StopScan::Stop { emit, stop } => (emit, Some(StopReason::StopString(stop))),
        };
        let stop = stop.or_else(|| {
            if self.is_exhausted() {
                Some(StopReason::MaxTokens)
            } else if self.n_prompt + self.generated.len() >= self.n_ctx {
                Some(StopReason::ContextFull)
            } else {
                None
            }
        });
        Ok(Pushed {
            text: Some(text),
            stop,
        })
    }

    /// Ends the continuation: returns the text still held back (an unfinished character,
    /// a possible start of a stop string), which is shown unless a stop string ended it.
    pub fn finish(&mut self, reason: &StopReason) -> String {
        let flushed = self.decoder.flush();
        if matches!(reason, StopReason::StopString(_)) {
            return String::new();
        }
        let mut rest = match self.stops.push(&flushed) {
            StopScan::Continue { emit } | StopScan::Stop { emit, .. } => emit,
        };
        rest.push_str(&self.stops.finish());
        rest
    }

    /// Tokens generated so far (end-of-generation tokens excluded).
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// Gives the sampler back: a [`crate::Session`] keeps its random sequence across prompts.
    pub fn into_sampler(self) -> Sampler {
        self.sampler
    }
}
