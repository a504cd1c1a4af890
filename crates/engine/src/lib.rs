//! Text generation on a plumb model: llama.cpp's sampler chain ([`sampling`]), stop strings
//! ([`StopMatcher`]), the generation loop over a KV cache that keeps what it can between
//! prompts ([`Session`]), and multi-turn chat on top of it ([`ChatSession`]).
//!
//! ```no_run
//! # fn demo<B: plumb_model::Backend>(backend: B) -> Result<(), Box<dyn std::error::Error>> {
//! use plumb_engine::sampling::{Sampler, SamplingConfig};
//! use plumb_engine::{GenerateOptions, Session};
//! let model = plumb_model::Model::load("model.gguf", backend)?;
//! let tokenizer = plumb_tokenizer::Tokenizer::from_gguf(model.metadata())?;
//! let mut session = Session::new(&model, &tokenizer, 2048, 256)?;
//! let mut sampler = Sampler::new(SamplingConfig::default(), model.hparams().n_vocab)?;
//! let prompt = tokenizer.encode("The capital of France is", true, true)?;
//! let options = GenerateOptions { max_tokens: Some(16), stop: vec!["\n".into()] };
//! let out = session.generate(&prompt, &mut sampler, &options, |piece| {
//!     print!("{piece}");
//!     std::ops::ControlFlow::Continue(())
//! })?;
//! println!("\n[{} tokens, stopped: {}]", out.tokens.len(), out.stop.name());
//! # Ok(()) }
//! ```

mod chat;
mod engine;
mod error;
mod generate;
mod logprobs;
mod metrics;
mod request;
pub mod sampling;
mod scheduler;
mod sequence;
mod stop;
mod token_rate;

pub use chat::{chat_template, conversation_tokens, ChatSession, Transcript, TranscriptMessage};
pub use engine::{Engine, EngineConfig, SubmitError};
pub use error::EngineError;
pub use generate::{
    GenerateOptions, Generation, Progress, PromptStats, Session, StopReason, Timings, Turn,
};
pub use metrics::{Histogram, Metrics, MetricsSnapshot, TTFT_BUCKETS};
pub use request::{Event, EventSink, Request, TokenLogprob};
pub use stop::{StopMatcher, StopScan};
