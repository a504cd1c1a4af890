//! What the server's own tests run on: a tiny byte-level tokenizer and a scripted engine,
//! so that the whole HTTP side is tested without a model.

use std::sync::{Arc, Mutex};

use plumb_engine::{
    Event, EventSink, MetricsSnapshot, Request, StopReason, SubmitError, TokenLogprob,
};
use plumb_gguf::Metadata;
use plumb_tokenizer::{byte_level_pieces, ChatTemplate, Tokenizer};

use crate::generation::Generator;
use crate::state::{AppState, ServerConfig};
use crate::validation::Defaults;

pub const N_CTX: usize = 64;

/// A byte-level BPE vocabulary of the 256 bytes and nothing else.
pub fn tokenizer() -> Tokenizer {
    let tokens = byte_level_pieces();
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", "gpt2");
    md.set("tokenizer.ggml.pre", "gpt-2");
    md.set("tokenizer.ggml.tokens", tokens);
    md.set("tokenizer.ggml.merges", Vec::<String>::new());
    Tokenizer::from_gguf(&md).expect("the tiny vocabulary is valid")
}

/// An engine that answers every choice with the same script: `Prefilled` (half the prompt
/// cached), then `"Hel"`, `"lo"`, `" world"` as three tokens and `"!"` released at the
/// finish, stopping with `length`. Or it refuses, or fails after the first token.
#[derive(Default)]
pub struct Scripted {
    pub refuse: Option<SubmitError>,
    pub fail_midway: bool,
    /// The requests it was given.
    pub requests: Mutex<Vec<Request>>,
}

pub const SCRIPT_TEXT: &str = "Hello world!";

impl Generator for Scripted {
    fn submit(&self, request: Request, mut sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        if let Some(err) = &self.refuse {
            return Err(err.clone());
        }
        let _ = sink.send(Event::Prefilled {
            prompt_tokens: request.prompt.len(),
            cached_tokens: request.prompt.len() / 2,
        });
        for choice in 0..request.n {
            for (i, text) in ["Hel", "lo", " world"].into_iter().enumerate() {
                let token = text.as_bytes()[0] as u32;
                let logprob = request.logprobs.map(|k| TokenLogprob {
                    token,
                    logprob: -0.5,
                    top: (0..k as u32).map(|t| (t + 65, -1.0 - t as f32)).collect(),
                });
                let _ = sink.send(Event::Token {
                    choice,
                    token,
                    text: text.into(),
                    logprob,
                });
                if self.fail_midway && i == 0 {
                    let _ = sink.send(Event::Failed {
                        message: "the model broke".into(),
                    });
                    return Ok(());
                }
            }
            let _ = sink.send(Event::Finished {
                choice,
                reason: StopReason::MaxTokens,
                text: "!".into(),
                completion_tokens: 4,
            });
        }
        self.requests.lock().unwrap().push(request);
        Ok(())
    }

    fn metrics(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            requests: self.requests.lock().unwrap().len() as u64,
            ..MetricsSnapshot::default()
        }
    }

    fn n_ctx(&self) -> usize {
        N_CTX
    }

    fn n_vocab(&self) -> usize {
        256
    }

    fn n_parallel(&self) -> usize {
        4
    }
}

/// The state of a server on `engine`, model `tiny`, with `api_key`.
pub fn state(engine: Arc<Scripted>, api_key: Option<&str>) -> Arc<AppState> {
    state_with_web(engine, api_key, None)
}

/// [`state`], serving the page in `web_dir` too.
pub fn state_with_web(
    engine: Arc<Scripted>,
    api_key: Option<&str>,
    web_dir: Option<std::path::PathBuf>,
) -> Arc<AppState> {
    let config = ServerConfig {
        model_name: "tiny".into(),
        other_names: vec!["tiny.gguf".into()],
        api_key: api_key.map(str::to_owned),
        defaults: Defaults {
            temperature: 0.8,
            seed: Some(1),
            max_tokens: None,
        },
        web_dir,
    };
    let template = ChatTemplate::named("chatml").expect("chatml is built in");
    Arc::new(AppState::new(
        engine,
        Arc::new(tokenizer()),
        Some(template),
        config,
    ))
}
