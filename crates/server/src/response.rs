//! The JSON shapes of answers: whole (`chat.completion`, `text_completion`) and streamed
//! (`chat.completion.chunk`), with logprobs in each endpoint's format.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use plumb_engine::TokenLogprob;
use plumb_tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

use crate::generation::Answer;

/// Which endpoint an answer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// What every answer and chunk of one request carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    pub fn new(kind: Kind, model: String) -> Envelope {
        let prefix = match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        };
        Envelope {
            kind,
            id: format!("{prefix}-{}", random_hex()),
            created: unix_time(),
            model,
        }
    }

    /// The answer of a request that is not streamed.
    pub fn whole(&self, answer: &Answer, tokenizer: &Tokenizer, logprobs: bool) -> Value {
        let choices: Vec<Value> = answer
            .choices
            .iter()
            .enumerate()
            .map(|(index, choice)| {
                let logprobs =
                    logprobs.then(|| logprobs_json(self.kind, tokenizer, &choice.logprobs, &mut 0));
                let mut out = json!({
                    "index": index,
                    "logprobs": logprobs,
                    "finish_reason": choice.finish_reason,
                });
                match self.kind {
                    Kind::Chat => {
                        out["message"] = json!({"role": "assistant", "content": choice.text})
                    }
                    Kind::Completion => out["text"] = json!(choice.text),
                }
                out
            })
            .collect();
        json!({
            "id": self.id,
            "object": match self.kind {
                Kind::Chat => "chat.completion",
                Kind::Completion => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": answer.usage.to_json(),
        })
    }

    /// One streamed chunk. `usage` is `Some` when the client asked for it: `null` in every
    /// chunk but the last.
    pub fn chunk(&self, choices: Vec<Value>, usage: Option<Value>) -> Value {
        let mut out = json!({
            "id": self.id,
            "object": match self.kind {
                Kind::Chat => "chat.completion.chunk",
                Kind::Completion => "text_completion",
            },
            "created": self.created,
            "model": self.model,
            "choices": choices,
        });
        if let Some(usage) = usage {
            out["usage"] = usage;
        }
        out
    }
}

/// What a streamed chunk says about one choice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta<'a> {
    /// The chat's first chunk: the role.
    pub role: bool,
    pub text: Option<&'a str>,
    pub logprobs: Option<Value>,
    pub finish_reason: Option<&'static str>,
}

impl Delta<'_> {
    pub fn to_json(&self, kind: Kind, index: usize) -> Value {
        let mut out = json!({
            "index": index,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
        });
        match kind {
            Kind::Chat => {
                let mut delta = Map::new();
                if self.role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(text) = self.text {
                    delta.insert("content".into(), json!(text));
                }
                out["delta"] = Value::Object(delta);
            }
            Kind::Completion => out["text"] = json!(self.text.unwrap_or("")),
        }
        out
    }
}

/// Logprobs of `tokens`: chat's `{"content": [...]}`, or completions' parallel lists.
/// `offset` is the text offset of the first token, advanced past the last.
pub fn logprobs_json(
    kind: Kind,
    tokenizer: &Tokenizer,
    tokens: &[TokenLogprob],
    offset: &mut usize,
) -> Value {
    let piece = |id: u32| tokenizer.token_to_piece(id);
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    match kind {
        Kind::Chat => {
            let entry = |id: u32, logprob: f32| {
                let bytes = piece(id);
                json!({"token": text(&bytes), "logprob": logprob, "bytes": bytes})
            };
            let content: Vec<Value> = tokens
                .iter()
                .map(|t| {
                    let mut e = entry(t.token, t.logprob);
                    e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
                    e
                })
                .collect();
            json!({"content": content})
        }
        Kind::Completion => {
            let mut out = json!({
                "tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": [],
            });
            for t in tokens {
                let own = text(&piece(t.token));
                let top: Map<String, Value> = t
                    .top
                    .iter()
                    .map(|&(id, lp)| (text(&piece(id)), json!(lp)))
                    .collect();
                push(&mut out["text_offset"], json!(*offset));
                *offset += own.len();
                push(&mut out["tokens"], json!(own));
                push(&mut out["token_logprobs"], json!(t.logprob));
                push(&mut out["top_logprobs"], Value::Object(top));
            }
            out
        }
    }
}

fn push(list: &mut Value, value: Value) {
    if let Value::Array(items) = list {
        items.push(value);
    }
}

fn random_hex() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(unix_nanos());
    format!("{:016x}", hasher.finish())
}

fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Seconds since the epoch, as OpenAI's `created`.
pub fn unix_time() -> u64 {
    (unix_nanos() / 1_000_000_000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_deltas() {
        let first = Delta {
            role: true,
            text: Some(""),
            ..Delta::default()
        };
        assert_eq!(
            first.to_json(Kind::Chat, 1),
            json!({"index": 1, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null})
        );
        let last = Delta {
            finish_reason: Some("stop"),
            ..Delta::default()
        };
        assert_eq!(
            last.to_json(Kind::Chat, 0),
            json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"})
        );
        let text = Delta {
            text: Some("hi"),
            ..Delta::default()
        };
        assert_eq!(
            text.to_json(Kind::Completion, 0),
            json!({"index": 0, "text": "hi", "logprobs": null, "finish_reason": null})
        );
    }

    #[test]
    fn envelopes() {
        let chat = Envelope::new(Kind::Chat, "m".into());
        assert!(chat.id.starts_with("chatcmpl-"));
        let chunk = chat.chunk(vec![], Some(Value::Null));
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["usage"], Value::Null);
        assert!(chat.chunk(vec![], None).get("usage").is_none());
        let completion = Envelope::new(Kind::Completion, "m".into());
        assert!(completion.id.starts_with("cmpl-"));
        assert_ne!(Envelope::new(Kind::Chat, "m".into()).id, chat.id);
    }
}
