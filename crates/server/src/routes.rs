//! The routes: OpenAI's under `/v1` and un-prefixed, llama-server's extras, the chat page's
//! files with `--web`, and OpenAI-style JSON errors for unknown routes and wrong methods.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Json, Router};
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;
use crate::{auth, chat, completions, metrics, tokenize, web};

/// The whole API.
pub fn router(state: Arc<AppState>) -> Router {
    // As llama-server: health and the model list answer without the key.
    let public = Router::new()
        .route("/health", get(health))
        .route("/v1/health", get(health))
        .route("/models", get(models))
        .route("/v1/models", get(models));
    let private = Router::new()
        .route("/v1/chat/completions", post(chat::handler))
        .route("/chat/completions", post(chat::handler))
        .route("/v1/completions", post(completions::handler))
        .route("/completions", post(completions::handler))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/metrics", get(metrics::handler))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    public
        .merge(private)
        .fallback(fallback)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn health() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    Json(json!({
        "object": "list",
        "data": [{
            "id": state.config.model_name,
            "object": "model",
            "created": state.created,
            "owned_by": "plumb",
            "meta": {"n_ctx": state.engine.n_ctx(), "n_vocab": state.engine.n_vocab()},
        }],
    }))
    .into_response()
}

/// The page's files with `--web`, else (and for anything but a file) a JSON 404.
async fn fallback(State(state): State<Arc<AppState>>, method: Method, uri: Uri) -> Response {
    if let Some(dir) = &state.config.web_dir {
        if let Some(response) = web::serve_file(dir.clone(), &method, &uri).await {
            return response;
        }
    }
    not_found(method, uri).await
}

async fn not_found(method: Method, uri: Uri) -> Response {
    ApiError::route_not_found(method.as_str(), uri.path()).into_response()
}

async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    ApiError::method_not_allowed(method.as_str(), uri.path()).into_response()
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use plumb_engine::SubmitError;
    use serde_json::Value;
    use tower::ServiceExt;

    use super::*;
    use crate::test_support::{self, Scripted, N_CTX, SCRIPT_TEXT};

    struct Answer {
        status: StatusCode,
        headers: axum::http::HeaderMap,
        text: String,
    }

    impl Answer {
        fn json(&self) -> Value {
            serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
        }

        /// The `data:` payloads of an event stream.
        fn events(&self) -> Vec<String> {
            self.text
                .split("\n\n")
                .filter(|e| !e.is_empty())
                .map(|e| e.strip_prefix("data: ").expect("a data event").to_owned())
                .collect()
        }

        /// The chunks of an event stream that ends with `[DONE]`.
        fn chunks(&self) -> Vec<Value> {
            let events = self.events();
            assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
            events[..events.len() - 1]
                .iter()
                .map(|e| serde_json::from_str(e).unwrap())
                .collect()
        }
    }

    async fn send(state: Arc<AppState>, request: Request<Body>) -> Answer {
        let response = router(state).oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            text: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    async fn post(state: Arc<AppState>, path: &str, body: impl Into<Body>) -> Answer {
        let request = Request::post(path)
            .header("content-type", "application/json")
            .body(body.into())
            .unwrap();
        send(state, request).await
    }

    fn scripted() -> (Arc<Scripted>, Arc<AppState>) {
        let engine = Arc::new(Scripted::default());
        (engine.clone(), test_support::state(engine, None))
    }

    fn assert_error(answer: &Answer, status: u16, param: Option<&str>) {
        assert_eq!(answer.status.as_u16(), status, "{}", answer.text);
        let json = answer.json();
        let error = &json["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{json}"
        );
        assert!(error["type"].is_string(), "{json}");
        assert!(error.get("code").is_some(), "{json}");
        assert_eq!(error["param"].as_str(), param, "{json}");
    }

    #[tokio::test]
    async fn chat_answers_whole() {
        let (engine, state) = scripted();
        let body = json!({
            "model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
            "temperature": 0, "max_tokens": 5, "stop": "x", "n": 2, "seed": 3,
        });
        let answer = post(state, "/v1/chat/completions", body.to_string()).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        let json = answer.json();
        assert_eq!(json["object"], "chat.completion");
        assert_eq!(json["model"], "tiny");
        assert!(json["id"].as_str().unwrap().starts_with("chatcmpl-"));
        for (i, choice) in json["choices"].as_array().unwrap().iter().enumerate() {
            assert_eq!(choice["index"], i);
            assert_eq!(choice["message"]["role"], "assistant");
            assert_eq!(choice["message"]["content"], SCRIPT_TEXT);
            assert_eq!(choice["finish_reason"], "length");
            assert_eq!(choice["logprobs"], Value::Null);
        }
        let request = engine.requests.lock().unwrap().pop().unwrap();
        let prompt_tokens = request.prompt.len();
        assert_eq!(
            json["usage"],
            json!({
                "prompt_tokens": prompt_tokens, "completion_tokens": 8,
                "total_tokens": prompt_tokens + 8,
                "prompt_tokens_details": {"cached_tokens": prompt_tokens / 2},
            })
        );
        // The chat template (chatml) shaped the prompt.
        let text = test_support::tokenizer().decode(&request.prompt).unwrap();
        assert_eq!(
            text,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(request.sampling.temperature, 0.0);
        assert_eq!(request.sampling.seed, 3);
        assert_eq!((request.max_tokens, request.n), (5, 2));
        assert_eq!(request.stop, ["x"]);
        assert_eq!(request.logprobs, None);
    }

    #[tokio::test]
    async fn chat_streams_in_openai_chunks() {
        let (_, state) = scripted();
        let body = json!({
            "messages": [{"role": "user", "content": "Hi"}], "n": 2, "stream": true,
            "stream_options": {"include_usage": true},
        });
        let answer = post(state, "/chat/completions", body.to_string()).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.headers["content-type"], "text/event-stream");
        let chunks = answer.chunks();
        let first = &chunks[0];
        for i in 0..2 {
            assert_eq!(first["choices"][i]["delta"]["role"], "assistant");
        }
        let mut texts = [String::new(), String::new()];
        let mut finishes = [0, 0];
        for chunk in &chunks {
            assert_eq!(chunk["object"], "chat.completion.chunk");
            assert_eq!(chunk["id"], first["id"]);
            for choice in chunk["choices"].as_array().unwrap() {
                let i = choice["index"].as_u64().unwrap() as usize;
                if let Some(text) = choice["delta"]["content"].as_str() {
                    texts[i].push_str(text);
                }
                if !choice["finish_reason"].is_null() {
                    assert_eq!(choice["finish_reason"], "length");
                    assert_eq!(choice["delta"], json!({}));
                    finishes[i] += 1;
                }
            }
        }
        assert_eq!(texts, [SCRIPT_TEXT, SCRIPT_TEXT]);
        assert_eq!(finishes, [1, 1]);
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["completion_tokens"], 8);
        // The usage is on that last chunk alone.
        let with_usage = chunks.iter().filter(|c| !c["usage"].is_null()).count();
        assert_eq!(with_usage, 1);
    }

    #[tokio::test]
    async fn a_stream_without_include_usage_has_no_usage_chunk() {
        let (_, state) = scripted();
        let body = json!({"prompt": "Hi", "stream": true});
        let answer = post(state, "/v1/completions", body.to_string()).await;
        let chunks = answer.chunks();
        assert!(chunks
            .iter()
            .all(|c| c["choices"].as_array().unwrap().len() == 1));
        let text: String = chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, SCRIPT_TEXT);
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "length"
        );
    }

    #[tokio::test]
    async fn completions_of_several_prompts_and_token_ids() {
        let (engine, state) = scripted();
        let body = json!({"prompt": [[72, 105], [33]], "n": 2, "model": "tiny.gguf"});
        let answer = post(state, "/v1/completions", body.to_string()).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        let json = answer.json();
        assert_eq!(json["object"], "text_completion");
        assert_eq!(json["model"], "tiny.gguf");
        assert_eq!(json["choices"].as_array().unwrap().len(), 4);
        assert_eq!(json["choices"][3]["index"], 3);
        assert_eq!(json["choices"][3]["text"], SCRIPT_TEXT);
        assert_eq!(json["usage"]["prompt_tokens"], 3);
        assert_eq!(json["usage"]["completion_tokens"], 16);
        let requests = engine.requests.lock().unwrap();
        let prompts: Vec<_> = requests.iter().map(|r| r.prompt.clone()).collect();
        assert_eq!(prompts, [vec![72, 105], vec![33]]);
    }

    #[tokio::test]
    async fn logprobs_in_each_endpoints_format() {
        let (engine, state) = scripted();
        let body = json!({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 2});
        let json = post(state.clone(), "/v1/chat/completions", body.to_string())
            .await
            .json();
        let content = &json["choices"][0]["logprobs"]["content"];
        assert_eq!(content.as_array().unwrap().len(), 3);
        assert_eq!(content[0]["token"], "H");
        assert_eq!(content[0]["logprob"], -0.5);
        assert_eq!(content[0]["bytes"], json!([72]));
        assert_eq!(
            content[0]["top_logprobs"][1],
            json!({"token": "B", "logprob": -2.0, "bytes": [66]})
        );
        assert_eq!(
            engine.requests.lock().unwrap().pop().unwrap().logprobs,
            Some(2)
        );

        let body = json!({"prompt": "Hi", "logprobs": 1});
        let json = post(state.clone(), "/v1/completions", body.to_string())
            .await
            .json();
        let logprobs = &json["choices"][0]["logprobs"];
        assert_eq!(logprobs["tokens"], json!(["H", "l", " "]));
        assert_eq!(logprobs["token_logprobs"], json!([-0.5, -0.5, -0.5]));
        assert_eq!(logprobs["top_logprobs"][0], json!({"A": -1.0}));
        assert_eq!(logprobs["text_offset"], json!([0, 1, 2]));

        let body = json!({"prompt": "Hi", "logprobs": 0, "stream": true});
        let answer = post(state, "/v1/completions", body.to_string()).await;
        let first: Value = serde_json::from_str(&answer.events()[0]).unwrap();
        assert_eq!(first["choices"][0]["logprobs"]["tokens"], json!(["H"]));
    }

    #[tokio::test]
    async fn a_failure_mid_stream_is_an_error_event() {
        let engine = Arc::new(Scripted {
            fail_midway: true,
            ..Scripted::default()
        });
        let state = test_support::state(engine, None);
        let body = json!({"messages": [{"role": "user", "content": "Hi"}], "stream": true});
        let answer = post(state.clone(), "/v1/chat/completions", body.to_string()).await;
        let events = answer.events();
        assert_eq!(events.last().unwrap(), "[DONE]");
        let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
        assert_eq!(error["error"]["message"], "the model broke");
        let answer = post(state, "/v1/completions", json!({"prompt": "a"}).to_string()).await;
        assert_error(&answer, 500, None);
    }

    #[tokio::test]
    async fn a_full_queue_is_503_with_retry_after() {
        let engine = Arc::new(Scripted {
            refuse: Some(SubmitError::QueueFull { queued: 64 }),
            ..Scripted::default()
        });
        let state = test_support::state(engine, None);
        let answer = post(state, "/v1/completions", json!({"prompt": "a"}).to_string()).await;
        assert_error(&answer, 503, None);
        assert_eq!(answer.headers["retry-after"], "1");
    }

    #[tokio::test]
    async fn the_key_guards_all_but_health_and_models() {
        let engine = Arc::new(Scripted::default());
        let state = test_support::state(engine, Some("sk-test"));
        let body = json!({"prompt": "a"}).to_string();
        let answer = post(state.clone(), "/v1/completions", body.clone()).await;
        assert_error(&answer, 401, None);
        assert_eq!(answer.json()["error"]["type"], "authentication_error");
        let request = |key: &str| {
            Request::post("/v1/completions")
                .header("authorization", format!("Bearer {key}"))
                .body(Body::from(body.clone()))
                .unwrap()
        };
        assert_eq!(send(state.clone(), request("sk-wrong")).await.status, 401);
        assert_eq!(send(state.clone(), request("sk-test")).await.status, 200);
        for path in ["/health", "/v1/models", "/models"] {
            let answer = send(
                state.clone(),
                Request::get(path).body(Body::empty()).unwrap(),
            )
            .await;
            assert_eq!(answer.status, 200, "{path}");
        }
        let answer = send(state, Request::get("/metrics").body(Body::empty()).unwrap()).await;
        assert_eq!(answer.status, 401);
    }

    #[tokio::test]
    async fn models_health_metrics_and_tokens() {
        let (_, state) = scripted();
        let get = |path: &'static str| Request::get(path).body(Body::empty()).unwrap();
        let models = send(state.clone(), get("/v1/models")).await.json();
        assert_eq!(models["object"], "list");
        assert_eq!(models["data"][0]["id"], "tiny");
        assert_eq!(
            send(state.clone(), get("/health")).await.json()["status"],
            "ok"
        );
        let metrics = send(state.clone(), get("/metrics")).await;
        assert!(
            metrics.text.contains("plumb_requests_total 0"),
            "{}",
            metrics.text
        );

        let tokens = post(
            state.clone(),
            "/tokenize",
            json!({"content": "Hi"}).to_string(),
        )
        .await;
        assert_eq!(tokens.json(), json!({"tokens": [72, 105]}));
        let body = json!({"content": "H\u{e9}", "with_pieces": true});
        let pieces = post(state.clone(), "/tokenize", body.to_string())
            .await
            .json();
        assert_eq!(
            pieces,
            json!({"tokens": [{"id": 72, "piece": "H"}, {"id": 195, "piece": [195]}, {"id": 169, "piece": [169]}]})
        );
        let text = post(
            state.clone(),
            "/detokenize",
            json!({"tokens": [72, 105]}).to_string(),
        )
        .await;
        assert_eq!(text.json(), json!({"content": "Hi"}));
        let bad = post(
            state,
            "/detokenize",
            json!({"tokens": [72, 256]}).to_string(),
        )
        .await;
        assert_error(&bad, 400, Some("tokens[1]"));
    }

    #[tokio::test]
    async fn routes_and_methods_answer_in_json() {
        let (_, state) = scripted();
        let answer = send(
            state.clone(),
            Request::get("/v2/nothing").body(Body::empty()).unwrap(),
        )
        .await;
        assert_error(&answer, 404, None);
        let answer = send(
            state.clone(),
            Request::get("/v1/chat/completions")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_error(&answer, 405, None);
        let answer = post(state, "/health", "").await;
        assert_error(&answer, 405, None);
    }

    #[tokio::test]
    async fn refusals_name_their_field() {
        let (engine, state) = scripted();
        let long_prompt: Vec<u32> = vec![65; N_CTX];
        let chat = |extra: Value| {
            let mut body = json!({"messages": [{"role": "user", "content": "Hi"}]});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            body.to_string()
        };
        let cases: Vec<(&str, String, u16, Option<&str>)> = vec![
            ("/v1/chat/completions", "{".into(), 400, None),
            ("/v1/chat/completions", "\u{0}".into(), 400, None),
            ("/v1/chat/completions", "[]".into(), 400, None),
            (
                "/v1/chat/completions",
                chat(json!({"model": "gpt-4"})),
                404,
                Some("model"),
            ),
            (
                "/v1/chat/completions",
                chat(json!({"max_tokens": -5})),
                400,
                Some("max_tokens"),
            ),
            (
                "/v1/chat/completions",
                chat(json!({"top_logprobs": 21, "logprobs": true})),
                400,
                Some("top_logprobs"),
            ),
            (
                "/v1/chat/completions",
                chat(json!({"top_logprobs": 2})),
                400,
                Some("top_logprobs"),
            ),
            (
                "/v1/chat/completions",
                chat(json!({"logprobs": 1})),
                400,
                Some("logprobs"),
            ),
            (
                "/v1/chat/completions",
                chat(json!({"messages": [{"role": "user", "content": "a".repeat(N_CTX)}]})),
                400,
                Some("messages"),
            ),
            (
                "/v1/chat/completions",
                chat(json!({"response_format": {"type": "json_object"}})),
                400,
                Some("response_format.type"),
            ),
            (
                "/v1/completions",
                json!({"prompt": long_prompt}).to_string(),
                400,
                Some("prompt"),
            ),
            (
                "/v1/completions",
                json!({"prompt": [-1]}).to_string(),
                400,
                Some("prompt[0]"),
            ),
            (
                "/v1/completions",
                json!({"prompt": "a", "logprobs": 21}).to_string(),
                400,
                Some("logprobs"),
            ),
            (
                "/v1/completions",
                json!({"prompt": "a", "logprobs": true}).to_string(),
                400,
                Some("logprobs"),
            ),
            (
                "/v1/completions",
                json!({"prompt": "a", "logit_bias": {"256": 1}}).to_string(),
                400,
                Some("logit_bias[\"256\"]"),
            ),
            (
                "/tokenize",
                json!({"content": 5}).to_string(),
                400,
                Some("content"),
            ),
            ("/tokenize", json!({}).to_string(), 400, Some("content")),
        ];
        for (path, body, status, param) in cases {
            let answer = post(state.clone(), path, body.clone()).await;
            assert_error(&answer, status, param);
        }
        assert!(engine.requests.lock().unwrap().is_empty());
        let huge = vec![b' '; crate::body::MAX_BODY_BYTES + 1];
        assert_error(&post(state, "/v1/completions", huge).await, 413, None);
    }

    #[tokio::test]
    async fn web_serves_the_page_isolated_and_nothing_outside_it() {
        let root = std::env::temp_dir().join(format!("plumb-web-routes-{}", std::process::id()));
        std::fs::create_dir_all(root.join("assets")).unwrap();
        std::fs::write(root.join("index.html"), "<!doctype html>").unwrap();
        std::fs::write(root.join("assets/plumb_web_bg.wasm"), b"\0asm").unwrap();
        std::fs::write(root.with_extension("secret"), "outside").unwrap();
        let engine = Arc::new(Scripted::default());
        let state = test_support::state_with_web(engine, Some("key"), Some(root.clone()));
        let get = |path: &str| Request::get(path).body(Body::empty()).unwrap();

        // The files answer without the API key, with the isolation headers.
        let page = send(state.clone(), get("/")).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(page.text, "<!doctype html>");
        assert_eq!(page.headers["content-type"], "text/html; charset=utf-8");
        let wasm = send(state.clone(), get("/assets/plumb_web_bg.wasm")).await;
        assert_eq!(wasm.status, StatusCode::OK);
        assert_eq!(wasm.headers["content-type"], "application/wasm");
        for answer in [&page, &wasm] {
            assert_eq!(answer.headers["cross-origin-opener-policy"], "same-origin");
            assert_eq!(
                answer.headers["cross-origin-embedder-policy"],
                "require-corp"
            );
        }

        let missing = send(state.clone(), get("/nothing.js")).await;
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        let secret = format!("{}.secret", root.file_name().unwrap().to_str().unwrap());
        for path in [
            format!("/../{secret}"),
            format!("/%2e%2e/{secret}"),
            format!("/assets/..%2f..%2f{secret}"),
        ] {
            let answer = send(state.clone(), get(&path)).await;
            assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
            assert!(!answer.text.contains("outside"), "{path}");
        }

        // The API keeps its routes, its key and its JSON errors.
        let models = send(state.clone(), get("/v1/models")).await;
        assert_eq!(models.status, StatusCode::OK);
        let chat = post(state.clone(), "/v1/chat/completions", "{}").await;
        assert_eq!(chat.status, StatusCode::UNAUTHORIZED);
        let delete = Request::delete("/index.html").body(Body::empty()).unwrap();
        assert_error(&send(state, delete).await, 404, None);

        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_file(root.with_extension("secret")).unwrap();
    }
}
