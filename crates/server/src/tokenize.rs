//! `POST /tokenize` and `POST /detokenize`, as llama-server has them.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::body;
use crate::completions::token_ids;
use crate::error::ApiError;
use crate::state::AppState;
use crate::validation::{expected, Fields};

/// `{"content", "add_special"?, "parse_special"?, "with_pieces"?}` → `{"tokens": [...]}`;
/// with `with_pieces`, each token is `{"id", "piece"}`, the piece a string or, when it is
/// not valid UTF-8 on its own, its bytes.
pub async fn tokenize(
    State(state): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, ApiError> {
    let map = body::json_object(body).await?;
    let fields = Fields::new(&map);
    let content = fields
        .str("content")?
        .ok_or_else(|| ApiError::invalid("content", "content is required: a string"))?
        .to_owned();
    let add_special = fields.bool("add_special")?.unwrap_or(false);
    let parse_special = fields.bool("parse_special")?.unwrap_or(true);
    let with_pieces = fields.bool("with_pieces")?.unwrap_or(false);
    let tokenizer = state.tokenizer.clone();
    tokio::task::spawn_blocking(move || {
        let ids = tokenizer
            .encode(&content, add_special, parse_special)
            .map_err(|e| ApiError::invalid("content", e.to_string()))?;
        let tokens: Vec<Value> = if with_pieces {
            ids.iter()
                .map(|&id| {
                    let bytes = tokenizer.token_to_piece(id);
                    let piece = match String::from_utf8(bytes) {
                        Ok(text) => json!(text),
                        Err(e) => json!(e.into_bytes()),
                    };
                    json!({"id": id, "piece": piece})
                })
                .collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        Ok(Json(json!({ "tokens": tokens })).into_response())
    })
    .await
    .map_err(|e| ApiError::server(e.to_string()))?
}

/// `{"tokens": [...]}` → `{"content": "..."}`.
pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    body: Body,
) -> Result<Response, ApiError> {
    let map = body::json_object(body).await?;
    let fields = Fields::new(&map);
    let ids = match fields.get("tokens") {
        Some(Value::Array(list)) => token_ids(list, "tokens", state.tokenizer.n_vocab())?,
        Some(other) => return Err(expected("tokens", "a list of token ids", other)),
        None => {
            return Err(ApiError::invalid(
                "tokens",
                "tokens is required: a list of token ids",
            ))
        }
    };
    // Decoding a long list is CPU work: off the runtime's threads, as tokenizing is.
    let tokenizer = state.tokenizer.clone();
    tokio::task::spawn_blocking(move || {
        let content = tokenizer
            .decode(&ids)
            .map_err(|e| ApiError::invalid("tokens", e.to_string()))?;
        Ok(Json(json!({ "content": content })).into_response())
    })
    .await
    .map_err(|e| ApiError::server(e.to_string()))?
}
