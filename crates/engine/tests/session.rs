//! Generation and chat sessions on smollm2-135m (reference backend, greedy): streaming, stop
//! conditions, the context limit, and reuse of the KV cache between prompts.

use std::ops::ControlFlow;

use plumb_backend_ref::RefBackend;
use plumb_engine::sampling::{Sampler, SamplingConfig};
use plumb_engine::{
    chat_template, conversation_tokens, ChatSession, EngineError, GenerateOptions, Progress,
    Session, StopReason,
};
use plumb_model::Model;
use plumb_testutil::require_model;
use plumb_tokenizer::{ChatMessage, Tokenizer};

const PROMPT: &str = "The capital of France is";

fn load(path: &std::path::Path) -> (Model<RefBackend>, Tokenizer) {
    let model = Model::load(path, RefBackend::new()).unwrap();
    let tokenizer = Tokenizer::from_gguf(model.metadata()).unwrap();
    (model, tokenizer)
}

fn greedy(model: &Model<RefBackend>) -> Sampler {
    Sampler::new(SamplingConfig::greedy(), model.hparams().n_vocab).unwrap()
}

fn limit(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_tokens: Some(n),
        stop: Vec::new(),
    }
}

#[test]
fn generation_streams_stops_and_reuses_the_cache() {
    let path = require_model!("smollm2-135m");
    let (model, tokenizer) = load(&path);
    let prompt = tokenizer.encode(PROMPT, true, true).unwrap();
    let mut session = Session::new(&model, &tokenizer, 64, 32).unwrap();

    let mut pieces = Vec::new();
    let out = session
        .generate(&prompt, &mut greedy(&model), &limit(5), |piece| {
            pieces.push(piece.to_owned());
            ControlFlow::Continue(())
        })
        .unwrap();
    // llama.cpp's greedy continuation (see crates/cli/tests/run.rs).
    assert_eq!(out.text, " Paris.\n\nThe");
    assert_eq!(pieces.concat(), out.text);
    assert_eq!(out.tokens.len(), 5);
    assert_eq!(out.stop, StopReason::MaxTokens);
    assert_eq!(out.prompt.n_reused, 0);
    assert_eq!(out.prompt.n_evaluated, prompt.len());
    // The last token was sampled but never evaluated.
    assert_eq!(session.cached_tokens().len(), prompt.len() + 4);

    // The same prompt again: all but its last token come from the cache, and the text is the
    // same. A stop string across tokens ends it and is not shown.
    let options = GenerateOptions {
        max_tokens: Some(5),
        stop: vec![".\n".to_owned()],
    };
    let again = session
        .generate(&prompt, &mut greedy(&model), &options, |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(again.text, " Paris");
    assert_eq!(again.stop, StopReason::StopString(".\n".to_owned()));
    assert_eq!(again.prompt.n_reused, prompt.len() - 1);
    assert_eq!(again.prompt.n_evaluated, 1);

    // The callback can stop the generation.
    let stopped = session
        .generate(&prompt, &mut greedy(&model), &limit(5), |_| {
            ControlFlow::Break(())
        })
        .unwrap();
    assert_eq!(stopped.stop, StopReason::Interrupted);
    assert_eq!(stopped.text, " Paris");
}

#[test]
fn the_context_limit_stops_generation_and_refuses_long_prompts() {
    let path = require_model!("smollm2-135m");
    let (model, tokenizer) = load(&path);
    let prompt = tokenizer.encode(PROMPT, true, true).unwrap();

    let mut session = Session::new(&model, &tokenizer, prompt.len() + 3, 32).unwrap();
    let out = session
        .generate(&prompt, &mut greedy(&model), &limit(10), |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(out.stop, StopReason::ContextFull);
    assert_eq!(out.tokens.len(), 3);
    assert_eq!(out.text, " Paris.\n");

    let mut session = Session::new(&model, &tokenizer, prompt.len(), 32).unwrap();
    let err = session
        .generate(&prompt, &mut greedy(&model), &limit(10), |_| {
            ControlFlow::Continue(())
        })
        .unwrap_err();
    assert!(
        matches!(err, EngineError::PromptTooLong { n_prompt, n_ctx } if n_prompt == prompt.len() && n_ctx == prompt.len()),
        "{err}"
    );
    assert!(err.to_string().contains("--ctx-size"), "{err}");
}

#[test]
fn a_chat_turn_evaluates_only_the_new_message_and_matches_a_fresh_run() {
    let path = require_model!("smollm2-135m");
    let (model, tokenizer) = load(&path);
    let template = chat_template(&model, None).unwrap();
    let session = Session::new(&model, &tokenizer, 512, 64).unwrap();
    let mut chat = ChatSession::new(session, template);
    chat.set_system(Some("Answer in one short sentence."));
    let mut sampler = greedy(&model);
    let options = limit(6);

    let first = chat
        .send(
            "What is the capital of France?",
            &mut sampler,
            &options,
            |_| ControlFlow::Continue(()),
        )
        .unwrap();
    let cached_after_first = chat.session().cached_tokens().len();
    let second = chat
        .send("And of Italy?", &mut sampler, &options, |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(first.prompt.n_reused, 0);
    assert_eq!(second.prompt.n_reused, cached_after_first);
    assert_eq!(
        second.prompt.n_evaluated,
        second.prompt.n_tokens - cached_after_first
    );
    assert_eq!(chat.messages().len(), 5);
    assert_eq!(chat.messages()[4].content, second.text);

    // The same conversation in a fresh session gives the same reply.
    let template = chat_template(&model, None).unwrap();
    let conversation = &chat.messages()[..4];
    let prompt = conversation_tokens(&template, &tokenizer, conversation).unwrap();
    assert_eq!(prompt.len(), second.prompt.n_tokens);
    let mut fresh = Session::new(&model, &tokenizer, 512, 64).unwrap();
    let again = fresh
        .generate(&prompt, &mut greedy(&model), &options, |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(again.text, second.text);
    assert_eq!(again.prompt.n_evaluated, prompt.len());

    // Reset keeps the system message, whose tokens the cache still holds.
    chat.reset();
    assert_eq!(
        chat.messages(),
        [ChatMessage::new("system", "Answer in one short sentence.")]
    );
}

#[test]
fn a_turn_advances_one_pass_at_a_time_and_stops_when_asked() {
    let path = require_model!("smollm2-135m");
    let (model, tokenizer) = load(&path);
    let template = chat_template(&model, None).unwrap();
    let session = Session::new(&model, &tokenizer, 512, 64).unwrap();
    let mut chat = ChatSession::new(session, template);
    let mut sampler = greedy(&model);

    // Step by step, a reply is the one `send` gives, and each token comes in its own pass.
    let question = "What is the capital of France?";
    let mut turn = chat.start(question, &sampler, &limit(6)).unwrap();
    let mut passes = 0;
    let mut pieces = Vec::new();
    let stepped = loop {
        passes += 1;
        match chat
            .advance(turn, &mut sampler, |piece| {
                pieces.push(piece.to_owned());
                ControlFlow::Continue(())
            })
            .unwrap()
        {
            Progress::Running(next) => turn = next,
            Progress::Done(generation) => break generation,
        }
    };
    assert_eq!(stepped.tokens.len(), 6);
    // One pass for the prompt (shorter than the batch), one for each later token.
    assert_eq!(passes, 6);
    assert_eq!(pieces.concat(), stepped.text);
    assert_eq!(chat.messages().len(), 2);
    let template = chat_template(&model, None).unwrap();
    let mut fresh = ChatSession::new(Session::new(&model, &tokenizer, 512, 64).unwrap(), template);
    let sent = fresh
        .send(question, &mut greedy(&model), &limit(6), |_| {
            ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!(stepped.text, sent.text);

    // Interrupted after its first token, a reply ends there and still joins the chat.
    let mut turn = chat.start("And of Italy?", &sampler, &limit(6)).unwrap();
    let stopped = loop {
        turn = match chat
            .advance(turn, &mut sampler, |_| ControlFlow::Continue(()))
            .unwrap()
        {
            Progress::Running(mut next) => {
                if next.n_tokens() > 0 {
                    next.interrupt();
                }
                next
            }
            Progress::Done(generation) => break generation,
        };
    };
    assert_eq!(stopped.stop, StopReason::Interrupted);
    assert_eq!(stopped.tokens.len(), 1);
    assert_eq!(chat.messages().len(), 4);
    assert_eq!(chat.messages()[3].content, stopped.text);
}
