//! What a client asks of the engine, and what the engine tells it back, token by token.
//!
//! The server turns an HTTP request into a [`Request`] and hands the engine an [`EventSink`]
//! for it; the engine's scheduler runs the request alongside every other one and pushes
//! [`Event`]s into the sink as they happen. The sink is how the engine learns that a client
//! has gone: a closed sink frees the request's sequences and KV blocks at the next step.

use std::ops::ControlFlow;

use crate::generate::StopReason;
use crate::sampling::SamplingConfig;

/// One generation request: a tokenized prompt and how to continue it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The prompt's tokens (BOS and chat template already applied); never empty.
    pub prompt: Vec<u32>,
    pub sampling: SamplingConfig,
    /// Tokens to generate at most, per choice; generation also stops when the context is full.
    pub max_tokens: usize,
    /// Text that ends a choice when it appears; never shown.
    pub stop: Vec<String>,
    /// Choices: continuations of the same prompt, each with its own sampler. Choice `i`
    /// samples with seed `sampling.seed + i`. The prompt is evaluated once and its KV blocks
    /// are shared.
    pub n: usize,
    /// `Some(k)`: report each generated token's log-probability and the `k` most likely
    /// tokens at its position (from the model's distribution before sampling).
    pub logprobs: Option<usize>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
}

/// A generated token's log-probability and its position's most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// The most likely tokens at this position, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// What happens to a request, in order: `Prefilled` once, then for each choice its `Token`s
/// and one `Finished`; or `Failed` at any point, after which nothing follows.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The prompt is in the cache: `cached_tokens` of its `prompt_tokens` came from the
    /// prefix cache instead of being evaluated.
    Prefilled {
        prompt_tokens: usize,
        cached_tokens: usize,
    },
    /// A generated token of choice `choice`, with the text it adds: possibly empty (an
    /// unfinished character, text held back as a possible stop string), never a stop string.
    Token {
        choice: usize,
        token: u32,
        text: String,
        logprob: Option<TokenLogprob>,
    },
    /// Choice `choice` ended. `text` is what was held back and is now shown (it may be
    /// empty); `completion_tokens` counts its generated tokens.
    Finished {
        choice: usize,
        reason: StopReason,
        text: String,
        completion_tokens: usize,
    },
    /// The request failed; its sequences are gone.
    Failed { message: String },
}

/// Where the engine sends a request's events.
pub trait EventSink: Send {
    /// Delivers one event; `Break` says the receiver is gone and the request can be dropped.
    fn send(&mut self, event: Event) -> ControlFlow<()>;
    /// Whether the receiver is gone (a client that disconnected), checked every step, so
    /// that a request in the middle of its prompt is dropped too.
    fn is_closed(&self) -> bool;
}
