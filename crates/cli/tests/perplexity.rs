//! `plumb perplexity`: llama-perplexity's figure on the golden corpus, and the KL-divergence
//! round trip through a saved base run.

mod common;
use common::plumb;

use plumb_testutil::{require_model, testdata};

fn final_ppl(stdout: &str) -> f64 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Final estimate: PPL = "))
        .unwrap_or_else(|| panic!("no final estimate in {stdout}"));
    line["Final estimate: PPL = ".len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn value_after(stdout: &str, label: &str) -> f64 {
    let line = stdout.lines().find(|l| l.starts_with(label)).unwrap();
    line[label.len()..]
        .trim()
        .trim_end_matches('%')
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The whole corpus, as `testdata/golden/<model>/ppl.json` records llama.cpp's figure for it.
fn matches_llama_cpp_perplexity(name: &str) {
    let model = require_model!(name);
    let corpus = testdata("golden/corpus.txt");
    let ppl_json = testdata(&format!("golden/{name}/ppl.json"));
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ppl_json).unwrap()).unwrap();
    let expected = golden["ppl_second_half"].as_f64().unwrap();
    let out = plumb(&[
        "perplexity",
        "-m",
        model.to_str().unwrap(),
        "-f",
        corpus.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let ppl = final_ppl(&stdout);
    let scored = golden["n_scored_second_half"].as_u64().unwrap();
    assert!(
        stdout.contains(&format!("({scored} tokens scored")),
        "{stdout}"
    );
    eprintln!("{name}: plumb PPL {ppl:.4}, llama.cpp PPL {expected:.4}");
    assert!(
        (ppl / expected - 1.0).abs() < 0.01,
        "{name}: {ppl} vs llama.cpp {expected}"
    );
}

#[test]
fn smollm2_perplexity_matches_llama_cpp() {
    matches_llama_cpp_perplexity("smollm2-135m");
}

#[test]
fn gemma3_perplexity_matches_llama_cpp() {
    matches_llama_cpp_perplexity("gemma3-270m");
}

/// smollm2 (windows as they are) and gemma3 (the first token of each replaced by BOS) cover
/// both of llama-perplexity's window conventions; this one repeats smollm2's on a model 3.6×
/// its size (151 s on two cores beside the others, against smollm2's 45 s), whose forward pass
/// the golden logits cover. Run by hand with `--ignored`.
#[test]
#[ignore = "slow, and the convention it checks smollm2's test checks"]
fn qwen2_perplexity_matches_llama_cpp() {
    matches_llama_cpp_perplexity("qwen2.5-coder-0.5b");
}

#[test]
fn kl_divergence_against_a_saved_base() {
    let model = require_model!("smollm2-135m");
    let corpus = testdata("golden/corpus.txt");
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.logprobs.gguf");
    let (m, c, b) = (
        model.to_str().unwrap(),
        corpus.to_str().unwrap(),
        base.to_str().unwrap(),
    );
    let common = [
        "perplexity",
        "-m",
        m,
        "-f",
        c,
        "--ctx",
        "64",
        "--chunks",
        "3",
    ];
    let out = plumb(&[&common[..], &["--save-logits", b]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base_ppl = final_ppl(&String::from_utf8(out.stdout).unwrap());

    let out = plumb(&[&common[..], &["--kl-base", b, "--batch", "16"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        (final_ppl(&stdout) / base_ppl - 1.0).abs() < 1e-4,
        "{stdout}"
    );
    assert!(value_after(&stdout, "Mean KLD:") < 1e-4, "{stdout}");
    assert_eq!(value_after(&stdout, "Same top-1:"), 100.0, "{stdout}");
    assert!((value_after(&stdout, "PPL ratio (this / base):") - 1.0).abs() < 1e-3);

    let out = plumb(&[
        "perplexity",
        "-m",
        m,
        "-f",
        c,
        "--ctx",
        "128",
        "--chunks",
        "1",
        "--kl-base",
        b,
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("other tokens or settings"));
}

#[test]
fn text_shorter_than_a_window_is_an_error() {
    let model = require_model!("smollm2-135m");
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Too short.").unwrap();
    let out = plumb(&[
        "perplexity",
        "-m",
        model.to_str().unwrap(),
        "-f",
        short.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("short.txt") && err.contains("fewer than one window"),
        "{err}"
    );
}
