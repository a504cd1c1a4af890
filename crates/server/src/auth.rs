//! The API key: with `--api-key`, every endpoint but `/health` and the model list wants
//! `Authorization: Bearer KEY` (or llama-server's `X-Api-Key: KEY`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;
use crate::state::AppState;

pub async fn require_key(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    match &state.config.api_key {
        Some(key) if !presents(request.headers(), key) => ApiError::unauthorized().into_response(),
        _ => next.run(request).await,
    }
}

/// Whether the headers carry `key`.
fn presents(headers: &HeaderMap, key: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        // The scheme is case-insensitive (RFC 9110 §11.1).
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, key)| key.trim());
    let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    [bearer, x_api_key]
        .into_iter()
        .flatten()
        .any(|given| same(given.as_bytes(), key.as_bytes()))
}

/// Compares in time independent of where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(name, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn accepts_only_the_key() {
        assert!(presents(&headers("authorization", "Bearer sk-1"), "sk-1"));
        assert!(presents(&headers("authorization", "bearer sk-1"), "sk-1"));
        assert!(!presents(&headers("authorization", "Basic sk-1"), "sk-1"));
        assert!(presents(&headers("x-api-key", "sk-1"), "sk-1"));
        assert!(!presents(&headers("authorization", "Bearer sk-2"), "sk-1"));
        assert!(!presents(&headers("authorization", "sk-1"), "sk-1"));
        assert!(!presents(&headers("authorization", "Bearer sk-1x"), "sk-1"));
        assert!(!presents(&HeaderMap::new(), "sk-1"));
    }
}
