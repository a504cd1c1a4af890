//! `plumb run`: greedy generation streamed to stdout, timings on stderr, clear refusals.
//! Sampling, stop strings, prompt sources and the context limit: `run_sampling.rs`.

mod common;
use common::plumb;

use plumb_testutil::require_model;

#[test]
fn greedy_generation_matches_llama_cpp() {
    let model = require_model!("smollm2-135m");
    let out = plumb(&[
        "run",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "-n",
        "5",
        "--temp",
        "0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // llama.cpp's greedy continuation (testdata/golden/smollm2-135m/logits.gguf, `short`): its
    // first five steps all have margins above 0.5.
    assert_eq!(String::from_utf8_lossy(&out.stdout), " Paris.\n\nThe\n");
    for timing in [
        "load time",
        "prompt eval",
        "tokens per second",
        "5 generated",
    ] {
        assert!(stderr.contains(timing), "no {timing:?} in: {stderr}");
    }
}

#[test]
fn bad_sampling_flags_are_refused_before_loading() {
    let out = plumb(&[
        "run",
        "-m",
        "unused.gguf",
        "-p",
        "hi",
        "--samplers",
        "top_k;mirostat",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("\"mirostat\"") && stderr.contains("top_k"),
        "{stderr}"
    );
    let out = plumb(&[
        "run",
        "-m",
        "unused.gguf",
        "-p",
        "hi",
        "--logit-bias",
        "15043",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TOKEN+BIAS"), "{stderr}");
}

#[test]
fn a_broken_model_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"GGUF\x03\x00\x00\x00").unwrap();
    let out = plumb(&["run", "-m", path.to_str().unwrap(), "-p", "hi"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("broken.gguf") && stderr.contains("truncated"),
        "{stderr}"
    );
}
