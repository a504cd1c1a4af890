//! `plumb serve` under load, the short version of `bench/serve_load.py`'s runs: concurrent
//! streaming clients with mixed prompt lengths, every stream complete and none failed, and
//! afterwards no sequence and no KV block left in use. Then eight chat requests that share a
//! system prompt arrive together: one computes it, the seven others reuse its blocks, as
//! `cached_tokens` and `/metrics` show.

mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use plumb_testutil::require_model;
use serde_json::{json, Value};
use serve_common::Server;

/// Sends one request and returns the status and the body (`Connection: close`).
fn request(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The value of an unlabelled sample in `/metrics`.
fn metric(port: u16, name: &str) -> f64 {
    let (status, text) = request(port, "GET", "/metrics", "");
    assert_eq!(status, 200);
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

fn load_script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/serve_load.py")
}

#[test]
fn concurrent_streams_all_complete_and_leave_nothing_in_use() {
    let model = require_model!("smollm2-135m");
    let mut server = Server::start(&model, &["-np", "8", "-c", "512", "-t", "2"]);
    let url = format!("http://127.0.0.1:{}", server.port);
    let out = Command::new("python3")
        .arg(load_script())
        .args(["--url", &url, "--clients", "12", "--duration", "8"])
        .args(["--max-tokens", "24", "--prompt-words", "4,32,120,300"])
        .output()
        .expect("python3 runs bench/serve_load.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    eprintln!("{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["incomplete_streams"], 0, "{summary}");
    assert!(summary["requests"].as_u64().unwrap() >= 12, "{summary}");
    assert!(summary["generated_tokens"].as_u64().unwrap() > 0);
    // The last streams end before their sequences are retired: give the engine a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while metric(server.port, "plumb_active_sequences") != 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "sequences stay active"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(metric(server.port, "plumb_kv_blocks_used"), 0.0);
    assert_eq!(metric(server.port, "plumb_queue_depth"), 0.0);
    server.assert_alive();
}

#[test]
fn a_system_prompt_shared_by_eight_requests_is_computed_once() {
    let model = require_model!("smollm2-135m");
    let server = Server::start(&model, &["-np", "8", "-c", "512", "-t", "2"]);
    let port = server.port;
    let system = "You are a careful assistant. You answer questions about rivers, mountains, \
                  cities and the history of places in at most two sentences, and you say so \
                  plainly when you do not know.";
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                s.spawn(move || {
                    let body = json!({
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": format!("Name river number {i}.")},
                        ],
                        "max_tokens": 4,
                        "temperature": 0,
                    });
                    let (status, text) =
                        request(port, "POST", "/v1/chat/completions", &body.to_string());
                    assert_eq!(status, 200, "{text}");
                    serde_json::from_str(&text).unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut cached: Vec<u64> = answers
        .iter()
        .map(|a| {
            a["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()
        })
        .collect();
    cached.sort_unstable();
    assert_eq!(cached[0], 0, "{cached:?}");
    assert!(cached[1] >= 32, "{cached:?}");
    assert!(cached[1..].iter().all(|&c| c == cached[1]), "{cached:?}");
    assert_eq!(metric(port, "plumb_prefix_cache_hits_total"), 7.0);
    assert_eq!(
        metric(port, "plumb_prompt_tokens_cached_total"),
        7.0 * cached[1] as f64
    );
}
