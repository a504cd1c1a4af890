//! On the real models: the logits for position t from a prefill followed by single-token
//! decoding steps equal those of one pass over all t + 1 tokens, within 1e-4 relative.

mod common;

use common::max_rel_diff;
use plumb_backend_ref::RefBackend;
use plumb_model::{KvConfig, LogitsFor, Model};
use plumb_testutil::golden::GoldenLogits;
use plumb_testutil::{require_model, testdata};

const DECODE_STEPS: usize = 4;

fn check(name: &str) {
    let model_path = require_model!(name);
    let golden = testdata(&format!("golden/{name}/logits.gguf"));
    let tokens = GoldenLogits::open(&golden)
        .unwrap()
        .prompt("code")
        .unwrap()
        .tokens
        .clone();
    let model = Model::load(&model_path, RefBackend::new()).unwrap();
    let config = KvConfig::new(tokens.len(), 1, tokens.len());

    let mut cache = model.new_kv_cache(config).unwrap();
    let full = model.eval(&mut cache, 0, &tokens, LogitsFor::All).unwrap();

    let mut cache = model.new_kv_cache(config).unwrap();
    let split = tokens.len() - DECODE_STEPS;
    let mut logits = model
        .eval(&mut cache, 0, &tokens[..split], LogitsFor::Last)
        .unwrap();
    for t in split..tokens.len() {
        let diff = max_rel_diff(logits.last().unwrap(), full.row(t - 1));
        assert!(diff <= 1e-4, "{name}: position {} differs by {diff}", t - 1);
        logits = model
            .eval(&mut cache, 0, &tokens[t..=t], LogitsFor::Last)
            .unwrap();
    }
    let diff = max_rel_diff(logits.last().unwrap(), full.row(tokens.len() - 1));
    assert!(diff <= 1e-4, "{name}: last position differs by {diff}");
}

#[test]
fn smollm2_decodes_as_it_prefills() {
    check("smollm2-135m");
}

#[test]
fn qwen2_decodes_as_it_prefills() {
    check("qwen2.5-coder-0.5b");
}

#[test]
fn gemma3_decodes_as_it_prefills() {
    check("gemma3-270m");
}
