//! `POST /v1/completions`: raw prompts. `prompt` is a string, a list of strings, a list of
//! token ids, or a list of lists of token ids; each prompt gets its own `n` choices.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde_json::Value;

use crate::body;
use crate::error::ApiError;
use crate::generation::{self, Reply};
use crate::response::Kind;
use crate::state::AppState;
use crate::validation::{at_most, expected, generation_params, integer_in, top_logprobs, Fields};

/// Prompts one request may give at most; each takes a place in the engine's queue.
pub const MAX_PROMPTS: usize = 64;

/// One prompt as the client gave it.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
}

pub async fn handler(State(state): State<Arc<AppState>>, body: Body) -> Result<Response, ApiError> {
    let map = body::json_object(body).await?;
    let fields = Fields::new(&map);
    let limits = state.limits();
    let params = generation_params(&fields, &limits, &state.config.defaults)?;
    let model = state.model_name(params.model.as_deref())?;
    let prompts = prompts(&fields, limits.n_vocab)?;
    let logprobs = top_logprobs(&fields, "logprobs")?;
    let tokenizer = state.tokenizer.clone();
    // Tokenizing long prompts is CPU work: off the runtime's threads.
    let prompts = tokio::task::spawn_blocking(move || {
        prompts
            .into_iter()
            .map(|prompt| match prompt {
                Prompt::Tokens(tokens) => Ok(tokens),
                Prompt::Text(text) => tokenizer
                    .encode(&text, true, true)
                    .map_err(|e| ApiError::invalid("prompt", e.to_string())),
            })
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|e| ApiError::server(e.to_string()))??;
    for tokens in &prompts {
        state.check_prompt(tokens, "prompt")?;
    }
    let n_prompts = prompts.len();
    let rx = generation::submit(&*state.engine, prompts, &params, logprobs, "prompt").await?;
    let reply = Reply {
        kind: Kind::Completion,
        model,
        n_prompts,
        logprobs: logprobs.is_some(),
    };
    reply.send(&state, rx, &params).await
}

/// `prompt`, checked: token ids must be in the vocabulary.
pub fn prompts(fields: &Fields, n_vocab: usize) -> Result<Vec<Prompt>, ApiError> {
    const SHAPES: &str =
        "a string, a list of strings, a list of token ids or a list of lists of token ids";
    let list = match fields.get("prompt") {
        None => {
            return Err(ApiError::invalid(
                "prompt",
                format!("prompt is required: {SHAPES}"),
            ))
        }
        Some(Value::String(text)) => return Ok(vec![Prompt::Text(text.clone())]),
        Some(Value::Array(list)) if list.is_empty() => {
            return Err(ApiError::invalid(
                "prompt",
                "prompt must not be an empty list",
            ))
        }
        Some(Value::Array(list)) => list,
        Some(other) => return Err(expected("prompt", SHAPES, other)),
    };
    if list[0].is_number() {
        return Ok(vec![Prompt::Tokens(token_ids(list, "prompt", n_vocab)?)]);
    }
    at_most("prompt", list.len(), MAX_PROMPTS, "prompts")?;
    let first_is_text = list[0].is_string();
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let path = format!("prompt[{i}]");
            match item {
                Value::String(text) if first_is_text => Ok(Prompt::Text(text.clone())),
                Value::Array(ids) if !first_is_text && !ids.is_empty() => {
                    Ok(Prompt::Tokens(token_ids(ids, &path, n_vocab)?))
                }
                Value::Array(_) if !first_is_text => Err(ApiError::invalid(
                    &path,
                    format!("{path} must not be empty"),
                )),
                other if first_is_text => Err(expected(&path, "a string, like prompt[0]", other)),
                other => Err(expected(
                    &path,
                    "a list of token ids, like prompt[0]",
                    other,
                )),
            }
        })
        .collect()
}

/// Token ids, each in the vocabulary.
pub fn token_ids(list: &[Value], path: &str, n_vocab: usize) -> Result<Vec<u32>, ApiError> {
    let last = i64::try_from(n_vocab).unwrap_or(i64::MAX) - 1;
    list.iter()
        .enumerate()
        .map(|(i, id)| {
            // The element's path is only spelled out for an error: a list may hold millions.
            integer_in(id, path, 0, last)
                .map(|id| id as u32)
                .map_err(|_| {
                    expected(
                        &format!("{path}[{i}]"),
                        &format!("a token id of this model (0 to {last})"),
                        id,
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(prompt: Value) -> Result<Vec<Prompt>, ApiError> {
        let Value::Object(map) = json!({ "prompt": prompt }) else {
            panic!()
        };
        prompts(&Fields::new(&map), 100)
    }

    #[test]
    fn reads_every_shape() {
        use Prompt::*;
        assert_eq!(parse(json!("a")).unwrap(), [Text("a".into())]);
        assert_eq!(
            parse(json!(["a", "b"])).unwrap(),
            [Text("a".into()), Text("b".into())]
        );
        assert_eq!(parse(json!([1, 2, 99])).unwrap(), [Tokens(vec![1, 2, 99])]);
        assert_eq!(
            parse(json!([[1], [2, 3]])).unwrap(),
            [Tokens(vec![1]), Tokens(vec![2, 3])]
        );
    }

    #[test]
    fn errors_name_the_element() {
        let cases = [
            (json!(null), "prompt", "is required"),
            (json!(5), "prompt", "got 5"),
            (json!([]), "prompt", "must not be an empty list"),
            (
                json!([1, -1]),
                "prompt[1]",
                "a token id of this model (0 to 99), got -1",
            ),
            (json!([1000000000]), "prompt[0]", "got 1000000000"),
            (json!([100]), "prompt[0]", "got 100"),
            (json!([1, "a"]), "prompt[1]", "got \"a\""),
            (json!([1.5]), "prompt[0]", "got 1.5"),
            (json!(["a", 1]), "prompt[1]", "a string, like prompt[0]"),
            (json!([[1], "a"]), "prompt[1]", "a list of token ids"),
            (json!([[1], []]), "prompt[1]", "must not be empty"),
            (json!([[1], [1, 200]]), "prompt[1][1]", "got 200"),
            (json!([{}]), "prompt[0]", "a list of token ids"),
            (json!(vec!["a"; 65]), "prompt", "at most 64"),
        ];
        for (prompt, param, message) in cases {
            let err = parse(prompt.clone()).unwrap_err();
            assert_eq!(err.param.as_deref(), Some(param), "{prompt}");
            assert!(err.message.contains(message), "{prompt}: {}", err.message);
        }
    }
}
