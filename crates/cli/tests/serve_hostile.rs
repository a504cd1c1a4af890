//! `plumb serve` against hostile input: hundreds of malformed or abusive requests over raw
//! TCP, each answered with a 4xx and OpenAI's error JSON, then a burst of abandoned
//! requests; the server must still answer a normal request promptly afterwards.

mod serve_common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use plumb_testutil::require_model;
use serde_json::{json, Value};
use serve_common::Server;

const N_CTX: usize = 512;

struct Answer {
    status: u16,
    body: String,
}

/// Sends raw bytes as one request and reads the answer to its end (`Connection: close`).
fn exchange(port: u16, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    // A refused oversized body may close the connection before all of it is written.
    let _ = stream.write_all(request);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {head:?}"));
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Answer {
        status,
        body: if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

fn http(method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    request
}

/// A valid body for `path`, with `field` set to `value` (raw JSON text).
fn with_field(path: &str, field: &str, value: &str) -> Vec<u8> {
    let base = if path.contains("chat") {
        r#""messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4"#
    } else {
        r#""prompt": "Hi", "max_tokens": 4"#
    };
    format!("{{{base}, \"{field}\": {value}}}").into_bytes()
}

/// What a hostile request must get: its status, and the field that `error.param` names (a
/// prefix of it: `messages` covers `messages[0].role`), or `None` where no field is to blame
/// (the body is no JSON object, the route or method is wrong): then `param` must be null.
#[derive(Debug, Clone, Copy)]
struct Expect {
    status: u16,
    param: Option<&'static str>,
}

/// A 400 that blames `field`.
fn bad(field: &'static str) -> Expect {
    Expect {
        status: 400,
        param: Some(field),
    }
}

/// A refusal that blames no field.
fn refused(status: u16) -> Expect {
    Expect {
        status,
        param: None,
    }
}

/// Every hostile request: (what it is, the raw request, what it must get).
fn hostile_requests() -> Vec<(String, Vec<u8>, Expect)> {
    let mut cases: Vec<(String, Vec<u8>, Expect)> = Vec::new();
    let mut add =
        |name: String, request: Vec<u8>, expect: Expect| cases.push((name, request, expect));
    let endpoints = ["/v1/chat/completions", "/v1/completions"];

    // Fields × bad values, on both endpoints.
    let integers = [
        "-5",
        "0",
        "2147483648",
        "1.5",
        "\"5\"",
        "true",
        "[]",
        "{}",
        "1e400",
    ];
    let numbers = [
        "\"hot\"",
        "1e308",
        "-1e308",
        "NaN",
        "Infinity",
        "[1]",
        "{}",
        "null null",
    ];
    let fields: Vec<(&str, Vec<&str>)> = vec![
        ("max_tokens", integers.to_vec()),
        ("max_completion_tokens", integers.to_vec()),
        ("n_predict", vec!["-2", "0", "2147483648", "\"1\""]),
        ("temperature", [numbers.as_slice(), &["-0.5", "2.5"]].concat()),
        ("top_p", vec!["-0.1", "1.01", "\"1\"", "[]"]),
        ("top_k", vec!["-2", "1.5", "\"40\"", "false"]),
        ("min_p", vec!["-1", "2", "\"0\""]),
        ("presence_penalty", vec!["-3", "3", "\"0\""]),
        ("frequency_penalty", vec!["-2.5", "2.5", "{}"]),
        ("repeat_penalty", vec!["0", "-1", "11", "\"1\""]),
        (
            "seed",
            vec!["18446744073709551616", "1e30", "-1e30", "0.5", "\"42\"", "[42]"],
        ),
        ("n", vec!["0", "-1", "5", "1000000", "\"2\""]),
        (
            "stop",
            vec![
                "5",
                "[5]",
                "[\"a\", null]",
                "{\"a\": 1}",
                "[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\",\"n\",\"o\",\"p\",\"q\"]",
                "\"\\ud800\"",
                "[\"\\udfff\"]",
                "[\"a\\ud800b\"]",
                "\"\\ud800\\u0041\"",
            ],
        ),
        (
            "logit_bias",
            vec![
                "{\"49152\": 1}",
                "{\"1000000000\": 1}",
                "{\"-1\": 1}",
                "{\"abc\": 1}",
                "{\"1\": 101}",
                "{\"1\": \"x\"}",
                "[[1, 2]]",
                "5",
            ],
        ),
        ("stream", vec!["\"yes\"", "1", "[]"]),
        ("stream_options", vec!["{\"include_usage\": true}"]),
        ("ignore_eos", vec!["\"true\"", "1"]),
        ("model", vec!["\"gpt-4\"", "5", "[]"]),
    ];
    for path in endpoints {
        for (field, values) in &fields {
            for value in values {
                let body = with_field(path, field, value);
                // Values such as NaN or `null null` make the body malformed JSON, which no
                // field is to blame for; an unknown model is a 404.
                let expect = if serde_json::from_slice::<Value>(&body).is_err() {
                    refused(400)
                } else if *field == "model" && value.starts_with('"') {
                    Expect {
                        status: 404,
                        param: Some("model"),
                    }
                } else {
                    bad(field)
                };
                add(
                    format!("{path} {field}={value}"),
                    http("POST", path, &body),
                    expect,
                );
            }
        }
    }
    let chat = endpoints[0];
    let completions = endpoints[1];
    for value in ["21", "-1", "true", "\"3\""] {
        let body = with_field(chat, "logprobs", "true");
        let body = [
            &body[..body.len() - 1],
            format!(", \"top_logprobs\": {value}}}").as_bytes(),
        ]
        .concat();
        add(
            format!("chat top_logprobs={value}"),
            http("POST", chat, &body),
            bad("top_logprobs"),
        );
        add(
            format!("completions logprobs={value}"),
            http(
                "POST",
                completions,
                &with_field(completions, "logprobs", value),
            ),
            bad("logprobs"),
        );
    }
    add(
        "chat top_logprobs without logprobs".into(),
        http("POST", chat, &with_field(chat, "top_logprobs", "2")),
        bad("top_logprobs"),
    );
    add(
        "stream_options with stream false".into(),
        http(
            "POST",
            chat,
            br#"{"messages": [{"role": "user", "content": "Hi"}], "stream": false, "stream_options": {"include_usage": true}}"#,
        ),
        bad("stream_options"),
    );

    // Messages.
    let messages = [
        "null", "\"hi\"", "[]", "[123]", "[{}]", "[{\"role\": 123}]", "[{\"role\": \"user\"}]",
        "[{\"role\": \"system\", \"content\": 123}]", "[{\"role\": \"king\", \"content\": \"x\"}]",
        "[{\"role\": \"user\", \"content\": \"x\"}, {}]",
        "[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}}]}]",
        "[{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]",
        "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": 5}]}]",
        "[{\"role\": \"user\", \"content\": [7]}]", "{\"role\": \"user\"}",
    ];
    for value in messages {
        add(
            format!("messages={value}"),
            http(
                "POST",
                chat,
                format!("{{\"messages\": {value}}}").as_bytes(),
            ),
            bad("messages"),
        );
    }
    let long_text = "hello ".repeat(2 * N_CTX);
    add(
        "chat prompt too long for the context".into(),
        http(
            "POST",
            chat,
            json!({"messages": [{"role": "user", "content": long_text}]})
                .to_string()
                .as_bytes(),
        ),
        bad("messages"),
    );

    // Prompts.
    let prompts = [
        "null",
        "5",
        "[]",
        "[-1]",
        "[1000000000]",
        "[49152]",
        "[1, -1]",
        "[1.5]",
        "[1, \"a\"]",
        "[\"a\", 1]",
        "[[1], \"a\"]",
        "[[1], []]",
        "[[1], [2, 1000000000]]",
        "[{}]",
        "{}",
        "true",
        "[[[1]]]",
        "[null]",
    ];
    for value in prompts {
        add(
            format!("prompt={value}"),
            http(
                "POST",
                completions,
                format!("{{\"prompt\": {value}}}").as_bytes(),
            ),
            bad("prompt"),
        );
    }
    add(
        "prompt of 65 strings".into(),
        http(
            "POST",
            completions,
            json!({"prompt": vec!["a"; 65]}).to_string().as_bytes(),
        ),
        bad("prompt"),
    );
    add(
        "token prompt too long for the context".into(),
        http(
            "POST",
            completions,
            json!({"prompt": vec![1; N_CTX]}).to_string().as_bytes(),
        ),
        bad("prompt"),
    );
    add(
        "text prompt too long for the context".into(),
        http(
            "POST",
            completions,
            json!({"prompt": long_text}).to_string().as_bytes(),
        ),
        bad("prompt"),
    );

    // Bodies that are not JSON objects.
    let valid = br#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}"#;
    for cut in (1..valid.len() - 1).step_by(3) {
        add(
            format!("truncated JSON at {cut}"),
            http("POST", chat, &valid[..cut]),
            refused(400),
        );
    }
    let not_objects: [&[u8]; 14] = [
        b"",
        b" ",
        b"null",
        b"[]",
        b"123",
        b"\"x\"",
        b"true",
        b"{",
        b"}",
        b"{\"a\" 1}",
        b"{'messages': []}",
        b"\xff\xfe{}",
        b"{\"prompt\": \"\xc3\x28\"}",
        b"\x00",
    ];
    for (i, body) in not_objects.iter().enumerate() {
        add(
            format!("not an object #{i}"),
            http("POST", completions, body),
            refused(400),
        );
        add(
            format!("chat: not an object #{i}"),
            http("POST", chat, body),
            refused(400),
        );
    }
    add(
        "10 MB body".into(),
        http("POST", completions, &vec![b' '; 10 << 20]),
        refused(413),
    );
    add(
        "10 MB prompt string".into(),
        http(
            "POST",
            completions,
            json!({"prompt": "a".repeat(10 << 20)})
                .to_string()
                .as_bytes(),
        ),
        refused(413),
    );

    // Routes and methods.
    for (method, path, status) in [
        ("GET", "/v1/chat/completions", 405),
        ("GET", "/v1/completions", 405),
        ("PUT", "/v1/completions", 405),
        ("DELETE", "/v1/models", 405),
        ("POST", "/health", 405),
        ("GET", "/tokenize", 405),
        ("GET", "/v1/nothing", 404),
        ("POST", "/v2/chat/completions", 404),
        ("GET", "/../../etc/passwd", 404),
        ("POST", "/v1/chat/completions/extra", 404),
    ] {
        add(
            format!("{method} {path}"),
            http(method, path, b"{}"),
            refused(status),
        );
    }

    // Tokenize and detokenize.
    for (body, field) in [
        ("{}", "content"),
        ("{\"content\": 5}", "content"),
        ("{\"content\": \"a\", \"add_special\": 1}", "add_special"),
        (
            "{\"content\": \"a\", \"with_pieces\": \"yes\"}",
            "with_pieces",
        ),
    ] {
        add(
            format!("tokenize {body}"),
            http("POST", "/tokenize", body.as_bytes()),
            bad(field),
        );
    }
    for body in [
        "{}",
        "{\"tokens\": 5}",
        "{\"tokens\": [-1]}",
        "{\"tokens\": [1000000000]}",
        "{\"tokens\": [\"a\"]}",
    ] {
        add(
            format!("detokenize {body}"),
            http("POST", "/detokenize", body.as_bytes()),
            bad("tokens"),
        );
    }
    cases
}

/// The answer is the expected 4xx with OpenAI's error JSON, blaming the expected field.
fn assert_refused(name: &str, answer: &Answer, expect: Expect) {
    assert_eq!(
        answer.status, expect.status,
        "{name}: status {} ({})",
        answer.status, answer.body
    );
    let json: Value = serde_json::from_str(&answer.body)
        .unwrap_or_else(|e| panic!("{name}: the error is not JSON ({e}): {:?}", answer.body));
    let error = &json["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty())
            && error["type"].is_string()
            && (error["code"].is_null() || error["code"].is_string()),
        "{name}: not OpenAI's error shape: {json}"
    );
    match expect.param {
        Some(field) => assert!(
            error["param"]
                .as_str()
                .is_some_and(|p| p.starts_with(field)),
            "{name}: param should name {field}: {json}"
        ),
        None => assert!(
            error["param"].is_null(),
            "{name}: param should be null: {json}"
        ),
    }
}

fn normal_request(port: u16) -> Answer {
    let body = json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0});
    exchange(
        port,
        &http("POST", "/v1/completions", body.to_string().as_bytes()),
    )
}

/// A gauge's value in `/metrics`.
fn gauge(port: u16, name: &str) -> Option<f64> {
    let answer = exchange(port, &http("GET", "/metrics", b""));
    answer
        .body
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn hostile_requests_get_4xx_and_the_server_survives() {
    let model = require_model!("smollm2-135m");
    let ctx = N_CTX.to_string();
    let mut server = Server::start(
        &model,
        &["-c", &ctx, "-np", "2", "-t", "2", "--max-queue", "64"],
    );
    let port = server.port;

    let cases = hostile_requests();
    let names: BTreeSet<&str> = cases.iter().map(|(n, ..)| n.as_str()).collect();
    assert_eq!(names.len(), cases.len(), "case names are distinct");
    assert!(cases.len() >= 200, "only {} hostile requests", cases.len());
    for (name, request, expect) in &cases {
        assert_refused(name, &exchange(port, request), *expect);
    }
    server.assert_alive();
    let answer = normal_request(port);
    assert_eq!(answer.status, 200, "{}", answer.body);

    // 200 requests sent and abandoned at once, streamed and not: their sequences must be
    // freed, and a normal request must not wait for them to run.
    let mut abandoned = Vec::new();
    for i in 0..200 {
        let body = json!({
            "messages": [{"role": "user", "content": format!("Tell me a long story, number {i}.")}],
            "max_tokens": 256, "stream": i % 2 == 0,
        });
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .write_all(&http(
                "POST",
                "/v1/chat/completions",
                body.to_string().as_bytes(),
            ))
            .unwrap();
        abandoned.push(stream);
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(abandoned);
    let start = Instant::now();
    let answer = normal_request(port);
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "a normal request after the burst took {:?}",
        start.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let active = gauge(port, "plumb_active_sequences");
        let queued = gauge(port, "plumb_queue_depth");
        if active == Some(0.0) && queued == Some(0.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "abandoned requests still held: {active:?} active, {queued:?} queued"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.assert_alive();
}
