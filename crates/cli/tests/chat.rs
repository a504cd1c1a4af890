//! `plumb chat` driven through stdin, as a script would: two turns at --temp 0 that reuse the
//! KV cache and agree with `plumb run` on the same conversation, the commands, and Ctrl-C.

mod common;
use common::plumb;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use plumb_testutil::require_model;
use serde_json::json;

const SYSTEM: &str = "Answer in one short sentence.";
const FIRST: &str = "What is the capital of France?";
const SECOND: &str = "And of Italy?";

fn spawn_chat(model: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(["chat", "-m", model.to_str().unwrap()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("plumb chat starts")
}

fn chat(model: &Path, args: &[&str], input: &str) -> Output {
    let mut child = spawn_chat(model, args);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The numbers of a `plumb: turn N: …` line: prompt, reused, evaluated, generated, stop.
fn turn_stats(stderr: &str, turn: usize) -> (usize, usize, usize, usize, String) {
    let prefix = format!("plumb: turn {turn}: ");
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no turn {turn} line in: {stderr}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |label: &str| -> usize {
        let at = words.iter().position(|w| w.trim_end_matches(',') == label);
        words[at.unwrap_or_else(|| panic!("no {label} in {line}")) - 1]
            .parse()
            .unwrap()
    };
    let stop = words[words.iter().position(|w| *w == "stop:").unwrap() + 1];
    (
        number("prompt"),
        number("reused"),
        number("evaluated"),
        number("generated"),
        stop.to_owned(),
    )
}

fn transcript(path: &Path) -> Vec<(String, String)> {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn run(model: &Path, args: &[&str]) -> (String, String) {
    let mut all = vec![
        "run",
        "-m",
        model.to_str().unwrap(),
        "--temp",
        "0",
        "-n",
        "24",
    ];
    all.extend_from_slice(args);
    let out = plumb(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).unwrap(), stderr)
}

#[test]
fn two_turns_reuse_the_cache_and_match_plumb_run() {
    let model = require_model!("smollm2-135m");
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("chat.json");
    let input = format!("{FIRST}\n{SECOND}\n/save {}\n", saved.display());
    let out = chat(
        &model,
        &["--temp", "0", "-n", "24", "--system", SYSTEM],
        &input,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");

    let messages = transcript(&saved);
    let roles: Vec<&str> = messages.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user", "assistant"]);
    let (first_reply, second_reply) = (&messages[2].1, &messages[4].1);
    assert!(!first_reply.is_empty() && !second_reply.is_empty());
    // stdout holds the replies, each followed by a newline, and nothing else.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{first_reply}\n{second_reply}\n")
    );

    // The second turn's prompt starts with everything the cache holds after the first: the
    // first prompt and the reply's tokens (all evaluated when the reply ended on its own;
    // all but the last when -n cut it). Only the rest is evaluated.
    let (prompt1, reused1, evaluated1, generated1, stop1) = turn_stats(&stderr, 1);
    let (prompt2, reused2, evaluated2, _, _) = turn_stats(&stderr, 2);
    assert_eq!((reused1, evaluated1), (0, prompt1));
    let cached = prompt1 + generated1 - usize::from(stop1 == "length");
    assert_eq!(reused2, cached, "{stderr}");
    assert_eq!(evaluated2, prompt2 - cached);
    assert!(evaluated2 < prompt2 / 2, "{stderr}");

    // `plumb run` on the same conversations, each evaluated from scratch.
    let (text, _) = run(&model, &["--chat", "--system", SYSTEM, "-p", FIRST]);
    assert_eq!(text, format!("{first_reply}\n"));
    let before = dir.path().join("before.json");
    let conversation = json!({"messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": first_reply},
    ]});
    std::fs::write(&before, conversation.to_string()).unwrap();
    let (text, run_stderr) = run(
        &model,
        &[
            "--chat",
            "--messages",
            before.to_str().unwrap(),
            "-p",
            SECOND,
        ],
    );
    assert_eq!(text, format!("{second_reply}\n"));
    assert!(
        run_stderr.contains(&format!("{prompt2} prompt tokens")),
        "{run_stderr}"
    );
}

#[test]
fn commands_edit_save_and_load_the_conversation() {
    let model = require_model!("smollm2-135m");
    let dir = tempfile::tempdir().unwrap();
    let loaded = dir.path().join("in.json");
    let saved = dir.path().join("out.json");
    let reset = dir.path().join("reset.json");
    let conversation = json!({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
    ]});
    std::fs::write(&loaded, conversation.to_string()).unwrap();
    let input = format!(
        "/help\n/load {}\n/system Be very brief.\n/save {}\n/reset\n/save {}\n/bogus\n/save never\n",
        loaded.display(),
        saved.display(),
        reset.display()
    );
    let out = chat(&model, &[], &input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A script's bad command fails the run, naming it, and stops there.
    assert!(!out.status.success());
    assert!(stderr.contains("unknown command /bogus"), "{stderr}");
    assert!(!Path::new("never").exists());
    assert!(stderr.contains("/save FILE"), "help is on stderr: {stderr}");
    assert!(out.stdout.is_empty(), "no replies, no stdout");

    let pair = |r: &str, c: &str| (r.to_owned(), c.to_owned());
    assert_eq!(
        transcript(&saved),
        [
            pair("system", "Be very brief."),
            pair("user", "Hi"),
            pair("assistant", "Hello!")
        ]
    );
    assert_eq!(transcript(&reset), [pair("system", "Be very brief.")]);

    std::fs::write(&loaded, "{\"turns\": []}").unwrap();
    let out = chat(&model, &[], &format!("/load {}\n", loaded.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is not a chat transcript"), "{stderr}");
}

#[test]
fn ctrl_c_stops_the_reply_and_keeps_the_session() {
    let model = require_model!("smollm2-135m");
    let file = plumb_gguf::GgufFile::open(&model).unwrap();
    let tokenizer = plumb_tokenizer::Tokenizer::from_gguf(file.metadata()).unwrap();
    // With every end-of-turn token banned, the reply only ends at -n or by Ctrl-C.
    let mut args: Vec<String> = ["--temp", "0", "-n", "400"].map(String::from).to_vec();
    for id in tokenizer.end_of_generation_ids() {
        args.extend(["--logit-bias".to_owned(), format!("{id}-inf")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("chat.json");

    let mut child = spawn_chat(&model, &args);
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "Tell me a long story about a dragon.").unwrap();
    stdin.flush().unwrap();
    // Wait for the reply to start streaming, then interrupt it.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    writeln!(stdin, "/save {}", saved.display()).unwrap();
    drop(stdin);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("stop: interrupted"), "{stderr}");

    let messages = transcript(&saved);
    assert_eq!(messages.len(), 2);
    let reply = &messages[1].1;
    let (_, _, _, generated, _) = turn_stats(&stderr, 1);
    assert!(generated < 400, "{stderr}");
    let shown = [first.as_slice(), &rest].concat();
    assert_eq!(String::from_utf8_lossy(&shown), format!("{reply}\n"));
}

#[test]
fn a_full_context_cuts_the_reply_and_then_refuses_the_next_turn() {
    let model = require_model!("smollm2-135m");
    // The first prompt is 27 tokens: the reply gets the 3 left, then the conversation no
    // longer fits.
    let args = ["--temp", "0", "--system", SYSTEM, "-c", "30"];
    let out = chat(&model, &args, &format!("{FIRST}\n{SECOND}\n"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (prompt, _, _, generated, stop) = turn_stats(&stderr, 1);
    assert_eq!(
        (prompt + generated, stop.as_str()),
        (30, "context"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the context of 30 tokens is full; the reply was cut short"),
        "{stderr}"
    );
    assert!(!out.status.success());
    assert!(
        stderr.contains("a context of 30 has room for at most 29 prompt tokens")
            && stderr.contains("--ctx-size"),
        "{stderr}"
    );
}
