//! llama.cpp's own tokenizer test vocabularies (`models/ggml-vocab-*.gguf` with their
//! `.inp`/`.out` pairs, shipped in the llama-cpp-python 0.3.36 source package): every test
//! string, tokenized with `add_special = false` and `parse_special = false`, must give the
//! recorded ids. These cover pre-tokenizers the shipped models do not use (`llama-bpe`,
//! `gpt-2`, `deepseek-llm`, ...).
//!
//! The files live in `$PLUMB_LLAMA_VOCABS`, else `<plumb cache>/llama-vocabs`;
//! `scripts/fetch-llama-vocabs.sh` puts them there.

use std::path::PathBuf;

use plumb_gguf::GgufFile;
use plumb_tokenizer::{Tokenizer, TokenizerError};

const SEPARATOR: &str = "\n__ggml_vocab_test__\n";

fn vocab_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("PLUMB_LLAMA_VOCABS")
        .map(PathBuf::from)
        .unwrap_or_else(|| plumb_hub::models_dir().join("../llama-vocabs"));
    dir.is_dir().then_some(dir)
}

/// The test strings and expected ids, split as llama.cpp's `test-tokenizer-0` splits them.
fn read_cases(vocab: &std::path::Path) -> Vec<(String, Vec<u32>)> {
    let raw = std::fs::read_to_string(vocab.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(vocab.with_extension("gguf.out")).unwrap();
    let mut inputs = Vec::new();
    let mut rest = raw.as_str();
    while !rest.is_empty() {
        match rest.find(SEPARATOR) {
            Some(i) => {
                inputs.push(rest[..i].to_owned());
                rest = &rest[i + SEPARATOR.len()..];
            }
            None => {
                inputs.push(rest.to_owned());
                break;
            }
        }
    }
    let outputs: Vec<Vec<u32>> = out
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{}: .inp and .out disagree",
        vocab.display()
    );
    inputs.into_iter().zip(outputs).collect()
}

#[test]
fn llama_cpp_test_vocabularies() {
    let Some(dir) = vocab_dir() else {
        plumb_testutil::skip(
            module_path!(),
            "llama.cpp test vocabularies not found; run crates/tokenizer/scripts/fetch-llama-vocabs.sh",
        );
        return;
    };
    let mut vocabs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "gguf") && p.with_extension("gguf.out").exists()
        })
        .collect();
    vocabs.sort();
    let mut failures = Vec::new();
    let mut tested = Vec::new();
    for path in &vocabs {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let file = GgufFile::open(path).unwrap();
        let tok = match Tokenizer::from_gguf(file.metadata()) {
            Ok(tok) => tok,
            Err(e @ (TokenizerError::UnsupportedModel(_) | TokenizerError::UnknownPre { .. })) => {
                eprintln!("{name}: not supported by plumb ({e})");
                continue;
            }
            Err(e) => panic!("{name}: {e}"),
        };
        let cases = read_cases(path);
        for (text, want) in &cases {
            let got = tok.encode(text, false, false).unwrap();
            if &got != want {
                failures.push(format!("{name}: {text:?}\n  got  {got:?}\n  want {want:?}"));
            }
        }
        tested.push(format!("{name} ({} strings)", cases.len()));
    }
    eprintln!("tested: {}", tested.join(", "));
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        !tested.is_empty(),
        "no vocabulary in {} could be tested",
        dir.display()
    );
}
