//! Streamed answers: server-sent events in OpenAI's chunk format. The chat's first chunk of
//! each choice carries the role, each choice's `finish_reason` comes exactly once, with
//! `stream_options.include_usage` a last chunk has no choices and the usage, and the stream
//! ends with `data: [DONE]`. An engine failure mid-stream is a `data: {"error": …}` event,
//! then `[DONE]`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use plumb_engine::Event;
use plumb_tokenizer::Tokenizer;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::error::ApiError;
use crate::generation::{finish_reason, Tagged, Usage};
use crate::response::{logprobs_json, Delta, Envelope, Kind};

/// How one request's stream is shaped.
pub struct StreamShape {
    pub envelope: Envelope,
    pub n_prompts: usize,
    /// Choices per prompt.
    pub n: usize,
    pub include_usage: bool,
    pub logprobs: bool,
}

/// The SSE response for a request whose events come through `rx`.
pub fn response(
    rx: UnboundedReceiver<Tagged>,
    shape: StreamShape,
    tokenizer: Arc<Tokenizer>,
) -> Response {
    let stream = Stream::new(shape, tokenizer);
    let body = futures_util::stream::unfold((stream, rx), |(mut stream, mut rx)| async move {
        let frames = stream.next(&mut rx).await?;
        Some((Ok::<_, Infallible>(frames), (stream, rx)))
    });
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The state of one stream: turns engine events into SSE frames.
pub struct Stream {
    shape: StreamShape,
    tokenizer: Arc<Tokenizer>,
    usage: Usage,
    /// Choices not finished yet.
    open: usize,
    /// Completions' `text_offset` of each choice's next token.
    offsets: Vec<usize>,
    started: bool,
    done: bool,
}

impl Stream {
    pub fn new(shape: StreamShape, tokenizer: Arc<Tokenizer>) -> Stream {
        let choices = shape.n_prompts * shape.n;
        Stream {
            shape,
            tokenizer,
            usage: Usage::default(),
            open: choices,
            offsets: vec![0; choices],
            started: false,
            done: false,
        }
    }

    /// The next frames to send, or `None` when the stream is over.
    pub async fn next(&mut self, rx: &mut UnboundedReceiver<Tagged>) -> Option<String> {
        if !self.started {
            self.started = true;
            if self.shape.envelope.kind == Kind::Chat {
                return Some(self.role_chunks());
            }
        }
        while !self.done {
            let frames = match rx.recv().await {
                Some(tagged) => self.on_event(tagged),
                None => self.fail(ApiError::server(
                    "the engine stopped before the answer was complete",
                )),
            };
            if !frames.is_empty() {
                return Some(frames);
            }
        }
        None
    }

    /// The chat's first chunk: the role of every choice.
    fn role_chunks(&self) -> String {
        let choices = (0..self.open)
            .map(|index| {
                let delta = Delta {
                    role: true,
                    text: Some(""),
                    ..Delta::default()
                };
                delta.to_json(Kind::Chat, index)
            })
            .collect();
        self.frame(&self.shape.envelope.chunk(choices, self.null_usage()))
    }

    /// The frames an event gives (possibly none).
    pub fn on_event(&mut self, (prompt, event): Tagged) -> String {
        self.usage.add(&event);
        let n = self.shape.n;
        let kind = self.shape.envelope.kind;
        match event {
            Event::Prefilled { .. } => String::new(),
            Event::Failed { message } => self.fail(ApiError::server(message)),
            Event::Token { choice, .. } | Event::Finished { choice, .. }
                if choice >= n || prompt >= self.shape.n_prompts =>
            {
                self.fail(ApiError::server(format!(
                    "the engine sent choice {choice} of prompt {prompt}"
                )))
            }
            Event::Token {
                choice,
                text,
                logprob,
                ..
            } => {
                let index = prompt * n + choice;
                let logprobs = match (&logprob, self.shape.logprobs) {
                    (Some(lp), true) => Some(logprobs_json(
                        kind,
                        &self.tokenizer,
                        std::slice::from_ref(lp),
                        &mut self.offsets[index],
                    )),
                    _ => None,
                };
                if text.is_empty() && logprobs.is_none() {
                    return String::new();
                }
                let delta = Delta {
                    text: Some(&text),
                    logprobs,
                    ..Delta::default()
                };
                self.frame(
                    &self
                        .shape
                        .envelope
                        .chunk(vec![delta.to_json(kind, index)], self.null_usage()),
                )
            }
            Event::Finished {
                choice,
                reason,
                text,
                ..
            } => {
                let index = prompt * n + choice;
                let mut frames = String::new();
                if !text.is_empty() {
                    let delta = Delta {
                        text: Some(&text),
                        ..Delta::default()
                    };
                    let chunk = self
                        .shape
                        .envelope
                        .chunk(vec![delta.to_json(kind, index)], self.null_usage());
                    frames.push_str(&self.frame(&chunk));
                }
                self.open = self.open.saturating_sub(1);
                let delta = Delta {
                    finish_reason: Some(finish_reason(&reason)),
                    ..Delta::default()
                };
                // llama-server puts the usage on the chunk that ends the answer even
                // without include_usage, and clients written for it read it there. With
                // include_usage it goes on the empty chunk after it alone, as OpenAI's does:
                // clients that add up usage per chunk would count it twice.
                let usage = if self.open == 0 && !self.shape.include_usage {
                    Some(self.usage.to_json())
                } else {
                    self.null_usage()
                };
                let chunk = self
                    .shape
                    .envelope
                    .chunk(vec![delta.to_json(kind, index)], usage);
                frames.push_str(&self.frame(&chunk));
                if self.open == 0 {
                    if self.shape.include_usage {
                        let last = self
                            .shape
                            .envelope
                            .chunk(Vec::new(), Some(self.usage.to_json()));
                        frames.push_str(&self.frame(&last));
                    }
                    frames.push_str(DONE);
                    self.done = true;
                }
                frames
            }
        }
    }

    fn fail(&mut self, error: ApiError) -> String {
        self.done = true;
        format!("{}{DONE}", self.frame(&error.to_json()))
    }

    fn null_usage(&self) -> Option<Value> {
        self.shape.include_usage.then_some(Value::Null)
    }

    fn frame(&self, value: &Value) -> String {
        format!("data: {value}\n\n")
    }
}

const DONE: &str = "data: [DONE]\n\n";
