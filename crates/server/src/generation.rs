//! Handing requests to the engine and gathering what comes back: the [`Generator`] the
//! server runs on, the [`EventSink`] that forwards events into a channel, and the
//! collection of a whole answer for a request that is not streamed.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use axum::response::{IntoResponse, Response};
use plumb_engine::{
    Engine, Event, EventSink, MetricsSnapshot, Request, StopReason, SubmitError, TokenLogprob,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::error::ApiError;
use crate::response::{Envelope, Kind};
use crate::state::AppState;
use crate::streaming::{self, StreamShape};
use crate::validation::GenerationParams;

/// What the server needs of an engine. [`Engine`] is the one that generates; the server's
/// own tests run the HTTP side on a scripted one.
pub trait Generator: Send + Sync + 'static {
    fn submit(&self, request: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError>;
    fn metrics(&self) -> MetricsSnapshot;
    /// Positions one sequence may hold.
    fn n_ctx(&self) -> usize;
    fn n_vocab(&self) -> usize;
    /// Choices one request may ask for at most.
    fn n_parallel(&self) -> usize;
}

impl Generator for Engine {
    fn submit(&self, request: Request, sink: Box<dyn EventSink>) -> Result<(), SubmitError> {
        Engine::submit(self, request, sink)
    }

    fn metrics(&self) -> MetricsSnapshot {
        Engine::metrics(self)
    }

    fn n_ctx(&self) -> usize {
        Engine::n_ctx(self)
    }

    fn n_vocab(&self) -> usize {
        Engine::n_vocab(self)
    }

    fn n_parallel(&self) -> usize {
        Engine::n_parallel(self)
    }
}

/// An event of the `prompt`-th prompt of an HTTP request (completions may send several).
pub type Tagged = (usize, Event);

/// Forwards one engine request's events into the HTTP side's channel. The channel is
/// unbounded so that the engine's thread never waits on a slow client; a request's events
/// are bounded by its `max_tokens`.
struct ChannelSink {
    prompt: usize,
    tx: UnboundedSender<Tagged>,
}

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> ControlFlow<()> {
        match self.tx.send((self.prompt, event)) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }

    /// The receiver is dropped when the client disconnects: hyper drops the response body
    /// of a stream, or the handler's future of a request that is not streamed.
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// How long a request waits for a place in a full queue before it is refused with 503.
/// Places free up once the engine sees that abandoned requests' clients are gone, which takes
/// it up to a step: a client that gives up on a burst of requests and sends a new one at
/// once should be served, not refused.
const QUEUE_WAIT: Duration = Duration::from_secs(2);
const QUEUE_POLL: Duration = Duration::from_millis(20);

/// Submits one engine request per prompt, waiting up to [`QUEUE_WAIT`] in all for room in a
/// full queue. On a refusal the requests already submitted are cancelled by dropping the receiver.
pub async fn submit(
    engine: &dyn Generator,
    prompts: Vec<Vec<u32>>,
    params: &GenerationParams,
    logprobs: Option<usize>,
    prompt_field: &str,
) -> Result<UnboundedReceiver<Tagged>, ApiError> {
    let (tx, rx) = unbounded_channel();
    let deadline = Instant::now() + QUEUE_WAIT;
    for (prompt, tokens) in prompts.into_iter().enumerate() {
        let request = Request {
            prompt: tokens,
            sampling: params.sampling.clone(),
            max_tokens: params.max_tokens,
            stop: params.stop.clone(),
            n: params.n,
            logprobs,
            ignore_eos: params.ignore_eos,
        };
        loop {
            let sink = ChannelSink {
                prompt,
                tx: tx.clone(),
            };
            match engine.submit(request.clone(), Box::new(sink)) {
                Ok(()) => break,
                Err(SubmitError::QueueFull { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(QUEUE_POLL).await;
                }
                Err(e) => return Err(submit_error(e, prompt_field)),
            }
        }
    }
    Ok(rx)
}

fn submit_error(err: SubmitError, prompt_field: &str) -> ApiError {
    match err {
        SubmitError::QueueFull { .. } | SubmitError::Stopped => {
            ApiError::unavailable(err.to_string())
        }
        SubmitError::PromptTooLong { .. } => {
            ApiError::context_length(prompt_field, err.to_string())
        }
        SubmitError::Invalid { ref what, .. } => ApiError::invalid(what.clone(), err.to_string()),
    }
}

/// OpenAI's `finish_reason`.
pub fn finish_reason(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::MaxTokens | StopReason::ContextFull => "length",
        StopReason::EndOfGeneration | StopReason::StopString(_) | StopReason::Interrupted => "stop",
    }
}

/// Token counts of a whole HTTP request, all prompts and choices together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    pub completion_tokens: usize,
}

impl Usage {
    /// Counts what `event` adds.
    pub fn add(&mut self, event: &Event) {
        match event {
            Event::Prefilled {
                prompt_tokens,
                cached_tokens,
            } => {
                self.prompt_tokens += prompt_tokens;
                self.cached_tokens += cached_tokens;
            }
            Event::Finished {
                completion_tokens, ..
            } => self.completion_tokens += completion_tokens,
            Event::Token { .. } | Event::Failed { .. } => {}
        }
    }

    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        })
    }
}

/// One choice, generated to its end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Choice {
    pub text: String,
    pub logprobs: Vec<TokenLogprob>,
    pub finish_reason: &'static str,
}

/// A whole answer: choice `prompt * n + i` is the `i`-th choice of prompt `prompt`.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub choices: Vec<Choice>,
    pub usage: Usage,
}

/// Waits for every choice of every prompt to finish.
pub async fn collect(
    mut rx: UnboundedReceiver<Tagged>,
    n_prompts: usize,
    n: usize,
) -> Result<Answer, ApiError> {
    let mut choices = vec![Choice::default(); n_prompts * n];
    let mut usage = Usage::default();
    let mut open = choices.len();
    while open > 0 {
        let Some((prompt, event)) = rx.recv().await else {
            return Err(ApiError::server(
                "the engine stopped before the answer was complete",
            ));
        };
        usage.add(&event);
        match event {
            Event::Prefilled { .. } => {}
            Event::Token {
                choice,
                text,
                logprob,
                ..
            } => {
                let c = slot(&mut choices, prompt, n, choice)?;
                c.text.push_str(&text);
                c.logprobs.extend(logprob);
            }
            Event::Finished {
                choice,
                reason,
                text,
                ..
            } => {
                let c = slot(&mut choices, prompt, n, choice)?;
                c.text.push_str(&text);
                c.finish_reason = finish_reason(&reason);
                open -= 1;
            }
            Event::Failed { message } => return Err(ApiError::server(message)),
        }
    }
    Ok(Answer { choices, usage })
}

/// How to answer a submitted request.
pub struct Reply {
    pub kind: Kind,
    /// The model name the answer carries.
    pub model: String,
    pub n_prompts: usize,
    pub logprobs: bool,
}

impl Reply {
    /// The answer: a stream of events, or the whole answer once every choice is done.
    pub async fn send(
        self,
        state: &AppState,
        rx: UnboundedReceiver<Tagged>,
        params: &GenerationParams,
    ) -> Result<Response, ApiError> {
        let envelope = Envelope::new(self.kind, self.model);
        if params.stream {
            let shape = StreamShape {
                envelope,
                n_prompts: self.n_prompts,
                n: params.n,
                include_usage: params.include_usage,
                logprobs: self.logprobs,
            };
            return Ok(streaming::response(rx, shape, state.tokenizer.clone()));
        }
        let answer = collect(rx, self.n_prompts, params.n).await?;
        let json = envelope.whole(&answer, &state.tokenizer, self.logprobs);
        Ok(axum::Json(json).into_response())
    }
}

/// The choice an event is about; an index out of range is the engine's bug, reported.
pub fn slot(
    choices: &mut [Choice],
    prompt: usize,
    n: usize,
    choice: usize,
) -> Result<&mut Choice, ApiError> {
    let index = prompt * n + choice;
    if choice >= n {
        return Err(ApiError::server(format!(
            "the engine sent choice {choice} of {n}"
        )));
    }
    choices
        .get_mut(index)
        .ok_or_else(|| ApiError::server(format!("the engine sent prompt {prompt}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(choice: usize, text: &str) -> Event {
        Event::Token {
            choice,
            token: 1,
            text: text.into(),
            logprob: None,
        }
    }

    fn finished(choice: usize, reason: StopReason, text: &str, n: usize) -> Event {
        Event::Finished {
            choice,
            reason,
            text: text.into(),
            completion_tokens: n,
        }
    }

    #[tokio::test]
    async fn collects_choices_of_several_prompts() {
        let (tx, rx) = unbounded_channel();
        let events = [
            (
                1,
                Event::Prefilled {
                    prompt_tokens: 4,
                    cached_tokens: 0,
                },
            ),
            (
                0,
                Event::Prefilled {
                    prompt_tokens: 5,
                    cached_tokens: 2,
                },
            ),
            (0, token(1, "b")),
            (0, token(0, "a")),
            (1, token(0, "c")),
            (0, finished(0, StopReason::EndOfGeneration, "!", 2)),
            (1, finished(0, StopReason::MaxTokens, "", 1)),
            (1, finished(1, StopReason::ContextFull, "d", 1)),
            (0, finished(1, StopReason::StopString("x".into()), "", 1)),
        ];
        for e in events {
            tx.send(e).unwrap();
        }
        let answer = collect(rx, 2, 2).await.unwrap();
        let texts: Vec<_> = answer
            .choices
            .iter()
            .map(|c| (c.text.as_str(), c.finish_reason))
            .collect();
        assert_eq!(
            texts,
            [
                ("a!", "stop"),
                ("b", "stop"),
                ("c", "length"),
                ("d", "length")
            ]
        );
        assert_eq!(
            answer.usage,
            Usage {
                prompt_tokens: 9,
                cached_tokens: 2,
                completion_tokens: 5
            }
        );
        assert_eq!(answer.usage.to_json()["total_tokens"], 14);
    }

    #[tokio::test]
    async fn a_failure_or_a_vanished_engine_is_an_error() {
        let (tx, rx) = unbounded_channel();
        tx.send((
            0,
            Event::Failed {
                message: "boom".into(),
            },
        ))
        .unwrap();
        let err = collect(rx, 1, 1).await.unwrap_err();
        assert_eq!((err.status.as_u16(), err.message.as_str()), (500, "boom"));
        let (tx, rx) = unbounded_channel::<Tagged>();
        tx.send((0, token(0, "a"))).unwrap();
        drop(tx);
        assert_eq!(collect(rx, 1, 1).await.unwrap_err().status.as_u16(), 500);
        let (tx, rx) = unbounded_channel::<Tagged>();
        tx.send((0, token(3, "a"))).unwrap();
        assert_eq!(collect(rx, 1, 1).await.unwrap_err().status.as_u16(), 500);
    }

    #[test]
    fn sink_reports_a_dropped_receiver() {
        let (tx, rx) = unbounded_channel();
        let mut sink = ChannelSink { prompt: 0, tx };
        assert!(!sink.is_closed());
        assert_eq!(sink.send(token(0, "a")), ControlFlow::Continue(()));
        drop(rx);
        assert!(sink.is_closed());
        assert_eq!(sink.send(token(0, "a")), ControlFlow::Break(()));
    }

    #[test]
    fn submit_errors_map_to_statuses() {
        let status = |e| submit_error(e, "prompt").status.as_u16();
        assert_eq!(status(SubmitError::QueueFull { queued: 64 }), 503);
        assert_eq!(status(SubmitError::Stopped), 503);
        assert_eq!(
            status(SubmitError::PromptTooLong {
                n_prompt: 9,
                n_ctx: 8
            }),
            400
        );
        let err = submit_error(
            SubmitError::Invalid {
                what: "logit_bias".into(),
                reason: "bad".into(),
            },
            "prompt",
        );
        assert_eq!(err.param.as_deref(), Some("logit_bias"));
    }
}
