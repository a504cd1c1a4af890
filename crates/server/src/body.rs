//! Reading a request body: bounded in size and time, valid UTF-8, a JSON object.

use std::time::Duration;

use axum::body::Body;
use http_body_util::BodyExt;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The largest body accepted.
pub const MAX_BODY_BYTES: usize = 8 << 20;

/// How much of an oversized body is read and thrown away before answering 413. A client
/// that is still sending when the server closes the connection gets a reset instead of the
/// answer; reading on lets it see the 413. Past this, the connection is simply dropped.
const DRAIN_BYTES: usize = 64 << 20;

/// How long a client may take to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The body as a JSON object.
pub async fn json_object(body: Body) -> Result<Map<String, Value>, ApiError> {
    let bytes = read(body).await?;
    parse_object(&bytes)
}

/// The whole body, at most [`MAX_BODY_BYTES`].
async fn read(body: Body) -> Result<Vec<u8>, ApiError> {
    let reading = async {
        let mut body = body;
        let mut bytes = Vec::new();
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ApiError::malformed(format!("reading the body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            seen = seen.saturating_add(data.len());
            if seen > DRAIN_BYTES {
                break;
            }
            if seen <= MAX_BODY_BYTES {
                bytes.extend_from_slice(&data);
            }
        }
        if seen > MAX_BODY_BYTES {
            return Err(ApiError::too_large(MAX_BODY_BYTES));
        }
        Ok(bytes)
    };
    tokio::time::timeout(BODY_TIMEOUT, reading)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::timeout(format!(
                "the body did not arrive within {} s",
                BODY_TIMEOUT.as_secs()
            )))
        })
}

/// Parses a body that must be a JSON object, saying precisely what is wrong with it.
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ApiError::malformed(format!("the body is not valid UTF-8: {e}")))?;
    if text.trim().is_empty() {
        return Err(ApiError::malformed("the body is empty; send a JSON object"));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| match lone_surrogate(text) {
        Some(at) => ApiError::malformed(format!(
            "the body is not valid JSON: a string holds a lone UTF-16 surrogate, which is not \
             a character ({} at byte {at})",
            &text[at..at + 6]
        )),
        None => ApiError::malformed(format!("the body is not valid JSON: {e}")),
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::malformed(format!(
            "the body must be a JSON object, got {}",
            crate::validation::describe(&other)
        ))),
    }
}

/// The byte offset of the first `\uXXXX` escape that is half of a UTF-16 surrogate pair
/// without its other half. serde_json refuses those with messages that do not say so.
fn lone_surrogate(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let unit = |i: usize| {
        let hex = b.get(i..i + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF)
                if unit(i + 6).is_some_and(|u| (0xDC00..=0xDFFF).contains(&u)) =>
            {
                i += 12
            }
            Some(0xD800..=0xDFFF) => return Some(i),
            Some(_) => i += 6,
            // Any other escape: skip the escaped character, which may be a backslash.
            None => i += 2,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: &[u8]) -> String {
        parse_object(bytes).unwrap_err().message
    }

    #[test]
    fn names_what_is_wrong_with_a_body() {
        assert!(message(b"").contains("empty"));
        assert!(message(b"{\"a\": 1").contains("not valid JSON"));
        assert!(message(b"[1, 2]").contains("must be a JSON object, got [1,2]"));
        assert!(message(b"{\"a\": \"\xff\"}").contains("not valid UTF-8"));
        for lone in [
            r#"["\ud800"]"#,
            r#"["\udc00"]"#,
            r#"["\ud800\u0041"]"#,
            r#"["a\ud800x"]"#,
        ] {
            assert!(
                message(lone.as_bytes()).contains("lone UTF-16 surrogate"),
                "{lone}"
            );
        }
        assert_eq!(lone_surrogate(r#"["\\ud800"]"#), None);
        assert_eq!(lone_surrogate(r#"["\ud83d\ude00"]"#), None);
        assert!(message(b"{\"t\": NaN}").contains("not valid JSON"));
        assert!(parse_object(br#"{"a": 1}"#).is_ok());
    }

    #[tokio::test]
    async fn refuses_oversized_bodies() {
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        let err = read(Body::from(big)).await.unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
        let fits = vec![b' '; MAX_BODY_BYTES];
        assert_eq!(read(Body::from(fits)).await.unwrap().len(), MAX_BODY_BYTES);
    }
}
