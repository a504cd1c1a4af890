//! `POST /v1/chat/completions`: messages rendered with the model's chat template.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use plumb_engine::conversation_tokens;
use plumb_tokenizer::ChatMessage;
use serde_json::Value;

use crate::body;
use crate::error::ApiError;
use crate::generation::{self, Reply};
use crate::response::Kind;
use crate::state::AppState;
use crate::validation::{expected, generation_params, top_logprobs, Fields};

/// The roles a message may have; `developer` is OpenAI's newer name for `system`.
const ROLES: [&str; 5] = ["system", "user", "assistant", "tool", "developer"];

pub async fn handler(State(state): State<Arc<AppState>>, body: Body) -> Result<Response, ApiError> {
    let map = body::json_object(body).await?;
    let fields = Fields::new(&map);
    let params = generation_params(&fields, &state.limits(), &state.config.defaults)?;
    let model = state.model_name(params.model.as_deref())?;
    let messages = messages(&fields)?;
    let logprobs = fields.bool("logprobs")?.unwrap_or(false);
    let top = top_logprobs(&fields, "top_logprobs")?;
    if top.is_some() && !logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "top_logprobs needs logprobs to be true",
        ));
    }
    response_format(&fields)?;
    let template = state.template.clone().ok_or_else(|| {
        ApiError::invalid(
            "messages",
            "the model has no chat template; use /v1/completions",
        )
    })?;
    let tokenizer = state.tokenizer.clone();
    // Rendering and tokenizing a long conversation is CPU work: off the runtime's threads.
    let prompt =
        tokio::task::spawn_blocking(move || conversation_tokens(&template, &tokenizer, &messages))
            .await
            .map_err(|e| ApiError::server(e.to_string()))?
            .map_err(|e| ApiError::invalid("messages", e.to_string()))?;
    state.check_prompt(&prompt, "messages")?;
    let rx = generation::submit(
        &*state.engine,
        vec![prompt],
        &params,
        logprobs.then(|| top.unwrap_or(0)),
        "messages",
    )
    .await?;
    let reply = Reply {
        kind: Kind::Chat,
        model,
        n_prompts: 1,
        logprobs,
    };
    reply.send(&state, rx, &params).await
}

/// `messages`: a non-empty list of `{role, content}`, content a string or a list of text
/// parts.
pub fn messages(fields: &Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match fields.get("messages") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid("messages", "messages must not be empty"))
        }
        Some(other) => return Err(expected("messages", "a list of messages", other)),
        None => {
            return Err(ApiError::invalid(
                "messages",
                "messages is required: a list of {\"role\", \"content\"} objects",
            ))
        }
    };
    list.iter()
        .enumerate()
        .map(|(i, value)| {
            let path = format!("messages[{i}]");
            let message = Fields::nested(value, &path)?;
            let role = match message.str("role")? {
                Some(role) if ROLES.contains(&role) => role,
                Some(role) => {
                    return Err(ApiError::invalid(
                        message.path("role"),
                        format!(
                            "{}: unknown role {role:?}; use one of {}",
                            message.path("role"),
                            ROLES.join(", ")
                        ),
                    ))
                }
                None => {
                    return Err(ApiError::invalid(
                        message.path("role"),
                        format!("{} is required", message.path("role")),
                    ))
                }
            };
            let content = content(&message, role)?;
            let role = if role == "developer" { "system" } else { role };
            Ok(ChatMessage::new(role, content))
        })
        .collect()
}

/// A message's text: a string, or the text parts of a list joined by newlines. An
/// assistant's message may have none (it called tools).
fn content(message: &Fields, role: &str) -> Result<String, ApiError> {
    let path = message.path("content");
    match message.get("content") {
        None if role == "assistant" => Ok(String::new()),
        None => Err(ApiError::invalid(&path, format!("{path} is required"))),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let texts = parts
                .iter()
                .enumerate()
                .map(|(j, part)| {
                    let part_path = format!("{path}[{j}]");
                    let part = Fields::nested(part, &part_path)?;
                    match part.str("type")? {
                        Some("text") => part.str("text")?.ok_or_else(|| {
                            ApiError::invalid(
                                part.path("text"),
                                format!("{} is required", part.path("text")),
                            )
                        }),
                        other => Err(ApiError::invalid(
                            part.path("type"),
                            format!(
                                "{}: only \"text\" parts are supported, got {other:?}",
                                part.path("type")
                            ),
                        )),
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(texts.join("\n"))
        }
        Some(other) => Err(expected(&path, "a string or a list of text parts", other)),
    }
}

/// `response_format`: only plain text. plumb cannot constrain the output to JSON, and an
/// answer that silently ignores the request would be worse than a refusal.
fn response_format(fields: &Fields) -> Result<(), ApiError> {
    let Some(value) = fields.get("response_format") else {
        return Ok(());
    };
    let format = Fields::nested(value, "response_format")?;
    match format.str("type")? {
        None | Some("text") => Ok(()),
        Some(other) => Err(ApiError::invalid(
            "response_format.type",
            format!("response_format.type {other:?} is not supported; only \"text\" is"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Result<Vec<ChatMessage>, ApiError> {
        let Value::Object(map) = body else { panic!() };
        messages(&Fields::new(&map))
    }

    #[test]
    fn reads_strings_and_text_parts() {
        let got = parse(json!({"messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": null, "tool_calls": []},
        ]}))
        .unwrap();
        assert_eq!(
            got,
            [
                ChatMessage::new("system", "Be brief."),
                ChatMessage::new("user", "a\nb"),
                ChatMessage::new("assistant", ""),
            ]
        );
    }

    #[test]
    fn errors_name_the_message_and_field() {
        let cases = [
            (json!({}), "messages", "is required"),
            (json!({"messages": []}), "messages", "must not be empty"),
            (
                json!({"messages": "hi"}),
                "messages",
                "a list of messages, got \"hi\"",
            ),
            (
                json!({"messages": [123]}),
                "messages[0]",
                "messages[0] must be an object, got 123",
            ),
            (json!({"messages": [{}]}), "messages[0].role", "is required"),
            (
                json!({"messages": [{"role": 123}]}),
                "messages[0].role",
                "must be a string",
            ),
            (
                json!({"messages": [{"role": "king", "content": "x"}]}),
                "messages[0].role",
                "unknown role",
            ),
            (
                json!({"messages": [{"role": "system", "content": 123}]}),
                "messages[0].content",
                "a string or a list",
            ),
            (
                json!({"messages": [{"role": "user"}]}),
                "messages[0].content",
                "is required",
            ),
            (
                json!({"messages": [{"role": "user", "content": "a"}, {}]}),
                "messages[1].role",
                "is required",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                "messages[0].content[0].type",
                "only \"text\" parts",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]}),
                "messages[0].content[0].text",
                "is required",
            ),
            (
                json!({"messages": [{"role": "user", "content": [5]}]}),
                "messages[0].content[0]",
                "an object",
            ),
        ];
        for (body, param, message) in cases {
            let err = parse(body.clone()).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{body}");
            assert!(err.message.contains(message), "{body}: {}", err.message);
        }
    }

    #[test]
    fn only_text_responses() {
        let check = |body: Value| {
            let Value::Object(map) = body else { panic!() };
            response_format(&Fields::new(&map))
        };
        assert!(check(json!({"response_format": {"type": "text"}})).is_ok());
        assert!(check(json!({})).is_ok());
        let err = check(json!({"response_format": {"type": "json_object"}})).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("response_format.type"));
        assert!(check(json!({"response_format": 5})).is_err());
    }
}
