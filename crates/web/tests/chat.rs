//! The page's API natively, on smollm2-135m: a model streamed in chunks, a reply generated
//! pass by pass and stopped, and the errors a truncated file gives.

use std::ops::ControlFlow;

use plumb_testutil::require_model;
use plumb_web::{ChatSettings, ModelBytes, WebChat};

const GREEDY: ChatSettings = ChatSettings {
    temperature: 0.0,
    seed: 1,
    max_tokens: Some(8),
};

fn streamed(file: &[u8]) -> ModelBytes {
    let mut bytes = ModelBytes::new(file.len() as u64).unwrap();
    for chunk in file.chunks(1 << 20) {
        bytes.push(chunk).unwrap();
    }
    bytes
}

fn reply(chat: &mut WebChat, user: &str, stop_after: Option<usize>) -> (String, plumb_web::Reply) {
    chat.send(user).unwrap();
    let mut streamed = String::new();
    loop {
        let mut n_pieces = 0;
        let done = chat
            .step(|piece| {
                streamed.push_str(piece);
                n_pieces += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        if let Some(reply) = done {
            return (streamed, reply);
        }
        assert!(n_pieces <= 1, "one token per pass");
        if stop_after.is_some_and(|n| streamed.len() >= n) {
            chat.stop();
        }
    }
}

#[test]
fn a_streamed_model_chats_token_by_token_and_stops() {
    let path = require_model!("smollm2-135m");
    let file = std::fs::read(&path).unwrap();
    let mut chat = WebChat::load(streamed(&file), GREEDY, 1).unwrap();
    assert_eq!(chat.threads(), 1);
    assert!(
        chat.describe().starts_with("llama, 30 layers"),
        "{}",
        chat.describe()
    );

    let (text, first) = reply(&mut chat, "What is the capital of France?", None);
    assert_eq!(text, first.text);
    assert_eq!(first.n_tokens, 8);
    assert_eq!(first.stop, "length");
    assert!(first.tokens_per_second > 0.0);
    assert!(!chat.generating());

    // Again from a fresh conversation: the same reply, since the settings are greedy.
    chat.reset().unwrap();
    let (_, again) = reply(&mut chat, "What is the capital of France?", None);
    assert_eq!(again.text, first.text);

    // A stop request ends the reply at the next pass.
    let (text, stopped) = reply(&mut chat, "Tell me a story.", Some(1));
    assert_eq!(stopped.stop, "interrupted");
    assert!(stopped.n_tokens < 8, "{stopped:?}");
    assert_eq!(text, stopped.text);
    assert!(chat.step(|_| ControlFlow::Continue(())).is_err());
}

#[test]
fn two_threads_give_the_same_reply() {
    let path = require_model!("smollm2-135m");
    let file = std::fs::read(&path).unwrap();
    let prompt = "What is the capital of France?";
    let mut one = WebChat::load(streamed(&file), GREEDY, 1).unwrap();
    let mut two = WebChat::load(streamed(&file), GREEDY, 2).unwrap();
    assert_eq!(two.threads(), 2);
    assert_eq!(
        reply(&mut two, prompt, None).0,
        reply(&mut one, prompt, None).0
    );
}

#[test]
fn a_truncated_model_gives_the_gguf_readers_error() {
    let path = require_model!("smollm2-135m");
    let file = std::fs::read(&path).unwrap();
    let message = WebChat::load(streamed(&file[..file.len() / 2]), GREEDY, 1)
        .err()
        .unwrap()
        .to_string();
    assert!(message.contains("the file is truncated"), "{message}");
    assert!(
        message.contains("blk."),
        "names the first tensor cut off: {message}"
    );
}
