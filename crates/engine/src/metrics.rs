//! Counters and gauges of a running engine, shared with whoever reports them (the server's
//! `/metrics`). The scheduler writes them; readers take a [`MetricsSnapshot`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds, in seconds, of the time-to-first-token histogram's buckets (`+Inf` after).
pub const TTFT_BUCKETS: [f64; 12] = [
    0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 30.0,
];

/// The engine's live numbers. Counters only grow; gauges are the latest value.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests accepted into the queue.
    pub requests: AtomicU64,
    /// Requests that ended with an error.
    pub requests_failed: AtomicU64,
    /// Prompt tokens of accepted requests, cached or not.
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens that came from the prefix cache instead of being evaluated.
    pub cached_prompt_tokens: AtomicU64,
    /// Requests that found at least one block in the prefix cache.
    pub prefix_cache_hits: AtomicU64,
    /// Tokens generated, all choices together.
    pub generated_tokens: AtomicU64,
    /// Requests waiting for admission.
    pub queue_depth: AtomicU64,
    /// Sequences (choices) being prefilled or decoded.
    pub active_sequences: AtomicU64,
    pub kv_blocks_used: AtomicU64,
    pub kv_blocks_free: AtomicU64,
    /// Generated tokens per second over the last few seconds of decoding, as f64 bits.
    tokens_per_second: AtomicU64,
    ttft: Mutex<Histogram>,
}

/// A cumulative histogram in Prometheus's sense.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound of [`TTFT_BUCKETS`].
    pub buckets: [u64; TTFT_BUCKETS.len()],
    pub count: u64,
    pub sum: f64,
}

/// A consistent-enough copy of [`Metrics`] for one report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub requests: u64,
    pub requests_failed: u64,
    pub prompt_tokens: u64,
    pub cached_prompt_tokens: u64,
    pub prefix_cache_hits: u64,
    pub generated_tokens: u64,
    pub queue_depth: u64,
    pub active_sequences: u64,
    pub kv_blocks_used: u64,
    pub kv_blocks_free: u64,
    pub tokens_per_second: f64,
    pub time_to_first_token: Histogram,
}

impl Metrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set(gauge: &AtomicU64, value: u64) {
        gauge.store(value, Ordering::Relaxed);
    }

    pub fn set_tokens_per_second(&self, rate: f64) {
        self.tokens_per_second
            .store(rate.to_bits(), Ordering::Relaxed);
    }

    /// Records one request's time to its first token.
    pub fn observe_ttft(&self, seconds: f64) {
        let mut h = self.ttft.lock().unwrap_or_else(|e| e.into_inner());
        for (bucket, &bound) in h.buckets.iter_mut().zip(&TTFT_BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MetricsSnapshot {
            requests: get(&self.requests),
            requests_failed: get(&self.requests_failed),
            prompt_tokens: get(&self.prompt_tokens),
            cached_prompt_tokens: get(&self.cached_prompt_tokens),
            prefix_cache_hits: get(&self.prefix_cache_hits),
            generated_tokens: get(&self.generated_tokens),
            queue_depth: get(&self.queue_depth),
            active_sequences: get(&self.active_sequences),
            kv_blocks_used: get(&self.kv_blocks_used),
            kv_blocks_free: get(&self.kv_blocks_free),
            tokens_per_second: f64::from_bits(get(&self.tokens_per_second)),
            time_to_first_token: self.ttft.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }
}
