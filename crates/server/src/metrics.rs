//! `GET /metrics`: the engine's counters and gauges in Prometheus's text format.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use plumb_engine::{MetricsSnapshot, TTFT_BUCKETS};

use crate::state::AppState;

pub async fn handler(State(state): State<Arc<AppState>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render(&state.engine.metrics()),
    )
        .into_response()
}

/// The exposition text.
pub fn render(m: &MetricsSnapshot) -> String {
    let mut out = String::new();
    let counters = [
        (
            "requests_total",
            "Requests accepted into the queue.",
            m.requests,
        ),
        (
            "requests_failed_total",
            "Requests that ended with an error.",
            m.requests_failed,
        ),
        (
            "prompt_tokens_total",
            "Prompt tokens of accepted requests, cached or not.",
            m.prompt_tokens,
        ),
        (
            "prompt_tokens_cached_total",
            "Prompt tokens taken from the prefix cache.",
            m.cached_prompt_tokens,
        ),
        (
            "prefix_cache_hits_total",
            "Requests that found blocks in the prefix cache.",
            m.prefix_cache_hits,
        ),
        (
            "generated_tokens_total",
            "Tokens generated, all choices together.",
            m.generated_tokens,
        ),
    ];
    for (name, help, value) in counters {
        metric(&mut out, name, "counter", help, value as f64);
    }
    let gauges = [
        (
            "queue_depth",
            "Requests waiting for admission.",
            m.queue_depth as f64,
        ),
        (
            "active_sequences",
            "Sequences being prefilled or decoded.",
            m.active_sequences as f64,
        ),
        (
            "kv_blocks_used",
            "KV cache blocks in use.",
            m.kv_blocks_used as f64,
        ),
        (
            "kv_blocks_free",
            "KV cache blocks free (cached prefixes included).",
            m.kv_blocks_free as f64,
        ),
        (
            "tokens_per_second",
            "Generated tokens per second, recently.",
            m.tokens_per_second,
        ),
    ];
    for (name, help, value) in gauges {
        metric(&mut out, name, "gauge", help, value);
    }
    let h = &m.time_to_first_token;
    let name = "plumb_time_to_first_token_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Time from a request's arrival to its first token."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for (bound, count) in TTFT_BUCKETS.iter().zip(&h.buckets) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum);
    let _ = writeln!(out, "{name}_count {}", h.count);
    out
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = writeln!(out, "# HELP plumb_{name} {help}");
    let _ = writeln!(out, "# TYPE plumb_{name} {kind}");
    let _ = writeln!(out, "plumb_{name} {value}");
}

#[cfg(test)]
mod tests {
    use plumb_engine::Histogram;

    use super::*;

    #[test]
    fn renders_counters_gauges_and_the_histogram() {
        let mut buckets = [0; TTFT_BUCKETS.len()];
        buckets[3..].fill(2);
        let snapshot = MetricsSnapshot {
            requests: 7,
            kv_blocks_used: 3,
            tokens_per_second: 12.5,
            time_to_first_token: Histogram {
                buckets,
                count: 2,
                sum: 0.4,
            },
            ..MetricsSnapshot::default()
        };
        let text = render(&snapshot);
        for line in [
            "# TYPE plumb_requests_total counter",
            "plumb_requests_total 7",
            "plumb_kv_blocks_used 3",
            "plumb_tokens_per_second 12.5",
            "plumb_queue_depth 0",
            "plumb_prefix_cache_hits_total 0",
            "plumb_time_to_first_token_seconds_bucket{le=\"0.1\"} 0",
            "plumb_time_to_first_token_seconds_bucket{le=\"0.25\"} 2",
            "plumb_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2",
            "plumb_time_to_first_token_seconds_sum 0.4",
            "plumb_time_to_first_token_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
