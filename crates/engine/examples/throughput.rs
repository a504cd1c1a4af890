//! Aggregate generation speed of the engine with N concurrent requests against one alone, on
//! the cpu backend: `cargo run --release -p plumb-engine --example throughput -- MODEL.gguf
//! [N] [TOKENS]`. Run it on a quiet machine; other work on the cores makes the numbers noise.

use std::ops::ControlFlow;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_engine::sampling::SamplingConfig;
use plumb_engine::{Engine, EngineConfig, Event, EventSink, Request};
use plumb_model::Model;
use plumb_tokenizer::Tokenizer;

/// Counts a request's tokens into a shared channel; done when it sends `None`.
struct Counter(mpsc::Sender<Option<()>>);

impl EventSink for Counter {
    fn send(&mut self, event: Event) -> ControlFlow<()> {
        let message = match event {
            Event::Token { .. } => Some(()),
            Event::Finished { .. } | Event::Failed { .. } => None,
            Event::Prefilled { .. } => return ControlFlow::Continue(()),
        };
        match self.0.send(message) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }

    fn is_closed(&self) -> bool {
        false
    }
}

/// Runs `n` requests of `tokens` tokens at once; returns generated tokens per second.
fn run(engine: &Engine, tokenizer: &Tokenizer, n: usize, tokens: usize) -> f64 {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    for i in 0..n {
        let request = Request {
            prompt: tokenizer
                .encode(
                    &format!("Write a story about robot number {i}."),
                    true,
                    true,
                )
                .expect("the prompt tokenizes"),
            sampling: SamplingConfig {
                seed: i as u32,
                ..SamplingConfig::default()
            },
            max_tokens: tokens,
            stop: Vec::new(),
            n: 1,
            logprobs: None,
            ignore_eos: true,
        };
        engine
            .submit(request, Box::new(Counter(tx.clone())))
            .expect("the engine takes the request");
    }
    let (mut generated, mut open) = (0, n);
    while open > 0 {
        match rx.recv().expect("the engine answers") {
            Some(()) => generated += 1,
            None => open -= 1,
        }
    }
    generated as f64 / start.elapsed().as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: throughput MODEL.gguf [N] [TOKENS]")?;
    let n: usize = args.next().map_or(Ok(8), |a| a.parse())?;
    let tokens: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let threads = std::thread::available_parallelism()?.get();
    let backend = CpuBackend::new(threads, KvCacheType::F16)?.with_packed_weights();
    let model = Model::load(path, backend)?;
    let tokenizer = Arc::new(Tokenizer::from_gguf(model.metadata())?);
    let config = EngineConfig {
        n_parallel: n,
        n_ctx: 512,
        kv_tokens: 512 * n,
        step_tokens: 512,
        max_queue: n,
    };
    let engine = Engine::spawn(model, Arc::clone(&tokenizer), config)?;
    let one = run(&engine, &tokenizer, 1, tokens);
    let many = run(&engine, &tokenizer, n, tokens);
    println!(
        "1 request: {one:.1} tokens/s; {n} requests: {many:.1} tokens/s ({:.2}x)",
        many / one
    );
    Ok(())
}
