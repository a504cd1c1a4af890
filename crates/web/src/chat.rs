//! A chat with one model in the browser, generated one forward pass at a time.

use std::ops::ControlFlow;
use std::sync::Arc;

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_engine::sampling::{Sampler, SamplingConfig};
use plumb_engine::{chat_template, ChatSession, GenerateOptions, Progress, Session, Turn};
use plumb_model::{Backend, Model};
use plumb_tokenizer::Tokenizer;

use crate::{ModelBytes, WebError};

/// The context when the model was trained for more: `plumb run`'s default too.
const MAX_CTX: usize = 4096;

/// Prompt tokens per forward pass: `plumb run`'s default, so that a prompt is evaluated in
/// the same batches, with the same numbers, as natively.
const BATCH: usize = 256;

/// The sampling a page asks for; everything else is llama.cpp's default chain, as in
/// `plumb run`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChatSettings {
    /// 0 is greedy decoding.
    pub temperature: f32,
    pub seed: u32,
    /// New tokens per reply at most; `None`: until the model ends its turn or the context
    /// is full.
    pub max_tokens: Option<usize>,
}

/// A finished reply and its speed.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub text: String,
    pub n_tokens: usize,
    /// `eog`, `length`, `stop`, `context` or `interrupted`.
    pub stop: &'static str,
    pub prompt_tokens_evaluated: usize,
    pub prompt_tokens_per_second: f64,
    /// Generated tokens per second of their forward passes, as `plumb run` reports it.
    pub tokens_per_second: f64,
}

/// One model and a conversation with it, on the cpu backend unless another is given.
pub struct WebChat<B: Backend + 'static = CpuBackend> {
    model: &'static Model<B>,
    chat: ChatSession<'static, B>,
    sampler: Sampler,
    options: GenerateOptions,
    turn: Option<Turn>,
}

impl WebChat<CpuBackend> {
    /// Loads the model in `bytes` on the cpu backend, on `threads` threads (fewer where they
    /// cannot start: [`WebChat::threads`] says how many).
    pub fn load(
        bytes: ModelBytes,
        settings: ChatSettings,
        threads: usize,
    ) -> Result<WebChat, WebError> {
        let backend = CpuBackend::new(threads, KvCacheType::F16)?;
        WebChat::with_backend(bytes, backend, settings)
    }

    /// The threads the model computes on.
    pub fn threads(&self) -> usize {
        self.model.backend().n_threads()
    }
}

impl<B: Backend + 'static> WebChat<B> {
    /// Loads the model in `bytes` on `backend`.
    ///
    /// The model and its tokenizer live as long as the WebAssembly instance (a chat borrows
    /// them, and the page keeps one model per instance, starting a new Worker for another),
    /// so they are leaked rather than tied to the chat by a self-referential struct.
    pub fn with_backend(
        bytes: ModelBytes,
        backend: B,
        settings: ChatSettings,
    ) -> Result<WebChat<B>, WebError> {
        let file = Arc::new(bytes.into_gguf()?);
        let model = Model::from_file(file, backend)?;
        let tokenizer = Tokenizer::from_gguf(model.metadata())?;
        let template = chat_template(&model, None)?;
        let model: &'static Model<B> = Box::leak(Box::new(model));
        let tokenizer: &'static Tokenizer = Box::leak(Box::new(tokenizer));
        let n_ctx = model.hparams().n_ctx_train.clamp(2, MAX_CTX);
        let session = Session::new(model, tokenizer, n_ctx, BATCH)?;
        let (sampler, options) = sampling(model, settings)?;
        Ok(WebChat {
            model,
            chat: ChatSession::new(session, template),
            sampler,
            options,
            turn: None,
        })
    }

    /// The architecture and size, for the page to show.
    pub fn describe(&self) -> String {
        let hparams = self.model.hparams();
        format!(
            "{}, {} layers, context {} tokens",
            hparams.architecture.name(),
            hparams.n_layer,
            self.chat.session().n_ctx()
        )
    }

    /// The backend the model runs on.
    pub fn backend(&self) -> &B {
        self.model.backend()
    }

    /// New sampling settings, from the next reply on.
    pub fn configure(&mut self, settings: ChatSettings) -> Result<(), WebError> {
        if self.turn.is_some() {
            return Err(WebError::Busy);
        }
        (self.sampler, self.options) = sampling(self.model, settings)?;
        Ok(())
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) -> Result<(), WebError> {
        if self.turn.is_some() {
            return Err(WebError::Busy);
        }
        self.chat.reset();
        Ok(())
    }

    /// Sends a user message; [`WebChat::step`] then generates the reply.
    pub fn send(&mut self, user: &str) -> Result<(), WebError> {
        if self.turn.is_some() {
            return Err(WebError::Busy);
        }
        self.turn = Some(self.chat.start(user, &self.sampler, &self.options)?);
        Ok(())
    }

    /// Whether a reply is being generated.
    pub fn generating(&self) -> bool {
        self.turn.is_some()
    }

    /// Runs one forward pass of the reply (a batch of the prompt, or one token), giving
    /// `on_text` the new text; the finished reply at the end.
    pub fn step(
        &mut self,
        on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Option<Reply>, WebError> {
        let turn = self.turn.take().ok_or(WebError::NoReply)?;
        match self.chat.advance(turn, &mut self.sampler, on_text)? {
            Progress::Running(turn) => {
                self.turn = Some(turn);
                Ok(None)
            }
            Progress::Done(generation) => {
                let t = &generation.timings;
                Ok(Some(Reply {
                    n_tokens: generation.tokens.len(),
                    stop: generation.stop.name(),
                    prompt_tokens_evaluated: generation.prompt.n_evaluated,
                    prompt_tokens_per_second: per_second(
                        generation.prompt.n_evaluated,
                        t.prompt_eval.as_secs_f64(),
                    ),
                    tokens_per_second: per_second(t.n_decoded, t.decode.as_secs_f64()),
                    text: generation.text,
                }))
            }
        }
    }

    /// Asks the reply to stop: the next [`WebChat::step`] ends it.
    pub fn stop(&mut self) {
        if let Some(turn) = &mut self.turn {
            turn.interrupt();
        }
    }
}

fn sampling<B: Backend>(
    model: &Model<B>,
    settings: ChatSettings,
) -> Result<(Sampler, GenerateOptions), WebError> {
    if !settings.temperature.is_finite() || settings.temperature < 0.0 {
        return Err(WebError::Settings(format!(
            "temperature {} must be 0 (greedy) or more",
            settings.temperature
        )));
    }
    let config = SamplingConfig {
        temperature: settings.temperature,
        seed: settings.seed,
        ..SamplingConfig::default()
    };
    let sampler = Sampler::new(config, model.hparams().n_vocab)
        .map_err(|e| WebError::Settings(e.to_string()))?;
    let options = GenerateOptions {
        max_tokens: settings.max_tokens,
        stop: Vec::new(),
    };
    Ok((sampler, options))
}

fn per_second(n: usize, seconds: f64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    n as f64 / seconds.max(1e-9)
}
