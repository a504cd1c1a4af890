//! Errors as OpenAI sends them: `{"error": {"message", "type", "param", "code"}}` with the
//! HTTP status that says what kind of failure it is.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// A request that cannot be served, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// OpenAI's `type`: `invalid_request_error`, `authentication_error`, …
    pub kind: &'static str,
    pub message: String,
    /// The request field at fault, as a path (`messages[0].content`).
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before trying again (503).
    pub retry_after: Option<u32>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 for a field with a wrong type or value: `param` names the field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param.into()),
            ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 400 for a body that is not a JSON object at all.
    pub fn malformed(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 for a prompt that does not fit in the context.
    pub fn context_length(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::invalid(param, message)
        }
    }

    pub fn unauthorized() -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid or missing API key: send it as `Authorization: Bearer KEY`",
            )
        }
    }

    pub fn model_not_found(model: &str, served: &str) -> ApiError {
        ApiError {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model {model:?} does not exist; this server serves {served:?}"),
            )
        }
    }

    pub fn route_not_found(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found_error",
            format!("no such endpoint: {method} {path}"),
        )
    }

    pub fn method_not_allowed(method: &str, path: &str) -> ApiError {
        ApiError {
            code: Some("method_not_allowed"),
            ..ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                format!("{path} does not answer {method}"),
            )
        }
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            code: Some("request_too_large"),
            ..ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!("the request body is larger than {} MiB", limit >> 20),
            )
        }
    }

    pub fn timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            message,
        )
    }

    /// 503 with `Retry-After`: the queue is full, or the engine is gone.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                message,
            )
        }
    }

    /// 500: the engine failed while running an accepted request.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// The JSON body, also sent as a `data:` event when a stream fails.
    pub fn to_json(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.to_json())).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
