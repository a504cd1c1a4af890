//! The engine's scheduler on smollm2-135m (reference backend): batched requests give what each
//! gives alone, `n > 1`, cancellation, the queue limit, finish reasons, logprobs, and prefill
//! in chunks that leave running sequences a token every step.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use plumb_backend_ref::RefBackend;
use plumb_engine::sampling::SamplingConfig;
use plumb_engine::{
    Engine, EngineConfig, Event, EventSink, Request, StopReason, SubmitError, TokenLogprob,
};
use plumb_model::Model;
use plumb_testutil::require_model;
use plumb_tokenizer::Tokenizer;

const CONFIG: EngineConfig = EngineConfig {
    n_parallel: 4,
    n_ctx: 256,
    kv_tokens: 1024,
    step_tokens: 64,
    max_queue: 16,
};

/// Sends a request's events, tagged, into a channel shared by several requests, so that
/// their interleaving is visible.
struct ChannelSink {
    tag: usize,
    events: Sender<(usize, Event)>,
    closed: Arc<AtomicBool>,
}

impl EventSink for ChannelSink {
    fn send(&mut self, event: Event) -> std::ops::ControlFlow<()> {
        match self.events.send((self.tag, event)) {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(_) => std::ops::ControlFlow::Break(()),
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

fn sink(tag: usize, events: &Sender<(usize, Event)>) -> (Box<dyn EventSink>, Arc<AtomicBool>) {
    let closed = Arc::new(AtomicBool::new(false));
    let sink = ChannelSink {
        tag,
        events: events.clone(),
        closed: Arc::clone(&closed),
    };
    (Box::new(sink), closed)
}

fn start(path: &Path, config: EngineConfig) -> (Engine, Arc<Tokenizer>) {
    let model = Model::load(path, RefBackend::new()).unwrap();
    let tokenizer = Arc::new(Tokenizer::from_gguf(model.metadata()).unwrap());
    let engine = Engine::spawn(model, Arc::clone(&tokenizer), config).unwrap();
    (engine, tokenizer)
}

fn request(tokenizer: &Tokenizer, prompt: &str, max_tokens: usize) -> Request {
    Request {
        prompt: tokenizer.encode(prompt, true, true).unwrap(),
        sampling: SamplingConfig::greedy(),
        max_tokens,
        stop: Vec::new(),
        n: 1,
        logprobs: None,
        ignore_eos: false,
    }
}

/// One choice as its events told it.
#[derive(Debug, Clone, Default, PartialEq)]
struct Choice {
    tokens: Vec<u32>,
    text: String,
    logprobs: Vec<TokenLogprob>,
    reason: Option<StopReason>,
}

/// Reads events until the requests tagged `0..n_requests` have finished every choice.
fn collect(
    events: &Receiver<(usize, Event)>,
    n_requests: usize,
    n_choices: usize,
) -> Vec<Vec<Choice>> {
    let mut out = vec![vec![Choice::default(); n_choices]; n_requests];
    let mut open = n_requests * n_choices;
    while open > 0 {
        let (tag, event) = events.recv_timeout(Duration::from_secs(60)).unwrap();
        match event {
            Event::Prefilled { .. } => {}
            Event::Token {
                choice,
                token,
                text,
                logprob,
            } => {
                let c = &mut out[tag][choice];
                c.tokens.push(token);
                c.text.push_str(&text);
                c.logprobs.extend(logprob);
            }
            Event::Finished {
                choice,
                reason,
                text,
                completion_tokens,
            } => {
                let c = &mut out[tag][choice];
                c.text.push_str(&text);
                assert_eq!(c.reason, None, "finished twice");
                assert_eq!(completion_tokens, c.tokens.len());
                c.reason = Some(reason);
                open -= 1;
            }
            Event::Failed { message } => panic!("request {tag} failed: {message}"),
        }
    }
    out
}

/// Runs one request alone and returns its choices.
fn alone(engine: &Engine, request: Request) -> Vec<Choice> {
    let (tx, rx) = mpsc::channel();
    let n = request.n;
    engine.submit(request, sink(0, &tx).0).unwrap();
    collect(&rx, 1, n).remove(0)
}

/// Waits until the engine has no sequence and no block in use.
fn wait_until_idle(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = engine.metrics();
        if m.active_sequences == 0 && m.kv_blocks_used == 0 && m.queue_depth == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "still busy: {m:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):",
];

#[test]
fn batched_requests_give_what_each_gives_alone_and_n_2_gives_two_choices() {
    let path = require_model!("smollm2-135m");
    let (engine, tokenizer) = start(&path, CONFIG);
    let expected: Vec<Vec<Choice>> = PROMPTS
        .iter()
        .map(|p| alone(&engine, request(&tokenizer, p, 12)))
        .collect();
    assert!(
        expected[0][0].text.starts_with(" Paris.\n\nThe"),
        "{:?}",
        expected[0][0]
    );

    let (tx, rx) = mpsc::channel();
    for (tag, prompt) in PROMPTS.iter().enumerate() {
        engine
            .submit(request(&tokenizer, prompt, 12), sink(tag, &tx).0)
            .unwrap();
    }
    let batched = collect(&rx, PROMPTS.len(), 1);
    assert_eq!(batched, expected);

    // Two greedy choices of one prompt: both are the single answer.
    let two = alone(
        &engine,
        Request {
            n: 2,
            ..request(&tokenizer, PROMPTS[1], 12)
        },
    );
    assert_eq!(two, [expected[1][0].clone(), expected[1][0].clone()]);

    // Sampled choices use seeds seed and seed + 1: choice 1 is what seed + 1 gives alone.
    let sampled = |seed: u32, n: usize| Request {
        n,
        sampling: SamplingConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            ..SamplingConfig::default()
        },
        ..request(&tokenizer, PROMPTS[2], 12)
    };
    let pair = alone(&engine, sampled(7, 2));
    assert_eq!(pair[0], alone(&engine, sampled(7, 1))[0]);
    assert_eq!(pair[1], alone(&engine, sampled(8, 1))[0]);
    assert_ne!(pair[0].tokens, pair[1].tokens);
    wait_until_idle(&engine);
}

#[test]
fn finish_reasons_and_logprobs() {
    let path = require_model!("smollm2-135m");
    let (engine, tokenizer) = start(&path, CONFIG);
    let base = request(&tokenizer, PROMPTS[0], 6);

    let length = alone(&engine, base.clone()).remove(0);
    assert_eq!(length.reason, Some(StopReason::MaxTokens));
    assert_eq!(length.tokens.len(), 6);

    let stop = alone(
        &engine,
        Request {
            stop: vec![".\n".to_owned()],
            ..base.clone()
        },
    )
    .remove(0);
    assert_eq!(stop.reason, Some(StopReason::StopString(".\n".to_owned())));
    assert_eq!(stop.text, " Paris");

    // A bias that makes end-of-text the only choice.
    let eos = tokenizer.eos_id().unwrap();
    let eog = |ignore_eos| Request {
        sampling: SamplingConfig {
            logit_bias: vec![(eos, 100.0)],
            ..SamplingConfig::greedy()
        },
        ignore_eos,
        ..base.clone()
    };
    let ended = alone(&engine, eog(false)).remove(0);
    assert_eq!(ended.reason, Some(StopReason::EndOfGeneration));
    assert!(ended.tokens.is_empty());
    let ignored = alone(&engine, eog(true)).remove(0);
    assert_eq!(ignored.reason, Some(StopReason::MaxTokens));
    assert_eq!(ignored.tokens, [eos; 6]);

    let none = alone(
        &engine,
        Request {
            max_tokens: 0,
            ..base.clone()
        },
    )
    .remove(0);
    assert_eq!(none.reason, Some(StopReason::MaxTokens));
    assert!(none.tokens.is_empty());

    // Greedy: each token is its position's most likely one, with the same log-probability.
    let scored = alone(
        &engine,
        Request {
            logprobs: Some(5),
            ..base
        },
    )
    .remove(0);
    assert_eq!(scored.tokens, length.tokens);
    assert_eq!(scored.logprobs.len(), 6);
    for (lp, &token) in scored.logprobs.iter().zip(&scored.tokens) {
        assert_eq!(lp.token, token);
        assert_eq!(lp.top.len(), 5);
        assert_eq!(lp.top[0], (token, lp.logprob));
        assert!(lp.logprob <= 0.0, "{lp:?}");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1), "{lp:?}");
        let mass: f32 = lp.top.iter().map(|&(_, l)| l.exp()).sum();
        assert!(mass <= 1.0 + 1e-5, "{lp:?}");
    }
    wait_until_idle(&engine);
}

#[test]
fn a_closed_sink_frees_its_sequence_and_a_full_queue_refuses() {
    let path = require_model!("smollm2-135m");
    let (engine, tokenizer) = start(
        &path,
        EngineConfig {
            n_parallel: 1,
            max_queue: 1,
            ..CONFIG
        },
    );
    let (tx, rx) = mpsc::channel();
    let (first, first_closed) = sink(0, &tx);
    engine
        .submit(request(&tokenizer, PROMPTS[1], 200), first)
        .unwrap();
    // Admitted and generating: the queue is empty again.
    loop {
        if let (0, Event::Token { .. }) = rx.recv_timeout(Duration::from_secs(20)).unwrap() {
            break;
        }
    }
    assert_eq!(engine.metrics().active_sequences, 1);
    assert!(engine.metrics().kv_blocks_used > 0);

    // The only sequence is taken: one request waits, the next is refused.
    let (second, second_closed) = sink(1, &tx);
    engine
        .submit(request(&tokenizer, PROMPTS[0], 4), second)
        .unwrap();
    let (third, _) = sink(2, &tx);
    assert_eq!(
        engine.submit(request(&tokenizer, PROMPTS[0], 4), third),
        Err(SubmitError::QueueFull { queued: 1 })
    );

    // Both clients leave: the running request stops mid-stream, the waiting one never runs.
    second_closed.store(true, Ordering::Relaxed);
    first_closed.store(true, Ordering::Relaxed);
    wait_until_idle(&engine);
    while let Ok((tag, event)) = rx.try_recv() {
        assert!(
            tag == 0 && matches!(event, Event::Token { .. }),
            "{tag}: {event:?}"
        );
    }
    let m = engine.metrics();
    assert_eq!(m.requests, 2);
    assert_eq!(m.tokens_per_second, 0.0);

    // Still serving.
    let (tx, rx) = mpsc::channel();
    engine
        .submit(request(&tokenizer, PROMPTS[0], 2), sink(0, &tx).0)
        .unwrap();
    assert_eq!(collect(&rx, 1, 1)[0][0].tokens.len(), 2);
}

#[test]
fn requests_are_checked_before_they_queue() {
    let path = require_model!("smollm2-135m");
    let (engine, tokenizer) = start(&path, CONFIG);
    let (tx, _rx) = mpsc::channel();
    let base = request(&tokenizer, PROMPTS[0], 4);
    let refused = |request: Request| engine.submit(request, sink(0, &tx).0).unwrap_err();
    let what = |err: SubmitError| match err {
        SubmitError::Invalid { what, .. } => what,
        other => panic!("{other}"),
    };
    assert_eq!(
        refused(Request {
            prompt: vec![1; CONFIG.n_ctx],
            ..base.clone()
        }),
        SubmitError::PromptTooLong {
            n_prompt: CONFIG.n_ctx,
            n_ctx: CONFIG.n_ctx
        }
    );
    let bad_token = Request {
        prompt: vec![1, engine.n_vocab() as u32],
        ..base.clone()
    };
    assert_eq!(what(refused(bad_token)), "prompt");
    for n in [0, CONFIG.n_parallel + 1] {
        assert_eq!(what(refused(Request { n, ..base.clone() })), "n");
    }
    let nan = Request {
        sampling: SamplingConfig {
            temperature: f32::NAN,
            ..SamplingConfig::default()
        },
        ..base.clone()
    };
    assert_eq!(what(refused(nan)), "temperature");
    let bias = Request {
        sampling: SamplingConfig {
            logit_bias: vec![(u32::MAX, 1.0)],
            ..SamplingConfig::default()
        },
        ..base
    };
    assert_eq!(what(refused(bias)), "logit_bias");
    assert_eq!(engine.metrics().requests, 0);
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks_while_others_decode() {
    let path = require_model!("smollm2-135m");
    let (engine, tokenizer) = start(
        &path,
        EngineConfig {
            step_tokens: 8,
            ..CONFIG
        },
    );
    let (tx, rx) = mpsc::channel();
    engine
        .submit(request(&tokenizer, PROMPTS[0], 60), sink(0, &tx).0)
        .unwrap();
    loop {
        if let (0, Event::Token { .. }) = rx.recv_timeout(Duration::from_secs(20)).unwrap() {
            break;
        }
    }
    let long = PROMPTS[1].repeat(6);
    let long = request(&tokenizer, &long, 1);
    let n_long = long.prompt.len();
    engine.submit(long, sink(1, &tx).0).unwrap();
    // Each step carries the running sequence's token and 7 prompt tokens: the running
    // sequence gets a token in every step of the prefill.
    let mut decoded = 0;
    loop {
        match rx.recv_timeout(Duration::from_secs(20)).unwrap() {
            (0, Event::Token { .. }) => decoded += 1,
            (1, Event::Prefilled { prompt_tokens, .. }) => {
                assert_eq!(prompt_tokens, n_long);
                break;
            }
            (tag, event) => panic!("{tag}: {event:?}"),
        }
    }
    let steps = n_long.div_ceil(CONFIG_STEP_PROMPT);
    assert!(
        decoded + 1 >= steps,
        "{decoded} tokens during a prefill of {steps} steps"
    );
    drop(rx);
    wait_until_idle(&engine);
}

/// Prompt tokens per step in the chunked-prefill test: its budget less the one decoded token.
const CONFIG_STEP_PROMPT: usize = 7;

#[test]
fn a_prefix_shared_by_eight_requests_arriving_together_is_computed_once() {
    let path = require_model!("smollm2-135m");
    let config = EngineConfig {
        n_parallel: 8,
        ..CONFIG
    };
    let (engine, tokenizer) = start(&path, config);
    let system = "You are a helpful assistant who answers questions about geography, history \
                  and science in one short sentence, without any introduction, greeting or \
                  apology, and who says plainly that it does not know when it does not know.";
    let (tx, rx) = mpsc::channel();
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|i| {
            let text = format!("{system} Question {i}: name a river.");
            tokenizer.encode(&text, true, true).unwrap()
        })
        .collect();
    let shared = prompts[0]
        .iter()
        .zip(&prompts[1])
        .take_while(|(a, b)| a == b)
        .count();
    let block = 16;
    assert!(shared >= 2 * block, "the shared prefix is {shared} tokens");
    for (i, prompt) in prompts.into_iter().enumerate() {
        let mut r = request(&tokenizer, "", 4);
        r.prompt = prompt;
        engine.submit(r, sink(i, &tx).0).unwrap();
    }
    let mut cached = Vec::new();
    let mut finished = 0;
    while finished < 8 {
        match rx.recv_timeout(Duration::from_secs(60)).unwrap().1 {
            Event::Prefilled { cached_tokens, .. } => cached.push(cached_tokens),
            Event::Finished { .. } => finished += 1,
            Event::Failed { message } => panic!("{message}"),
            Event::Token { .. } => {}
        }
    }
    cached.sort_unstable();
    let reused = shared / block * block;
    assert_eq!(cached, [vec![0], vec![reused; 7]].concat());
    wait_until_idle(&engine);
    let m = engine.metrics();
    assert_eq!(m.prefix_cache_hits, 7);
    assert_eq!(m.cached_prompt_tokens, 7 * reused as u64);
}
