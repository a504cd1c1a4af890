//! The reference forward pass against llama.cpp's golden logits, for every shipped model and
//! golden prompt: mean coarsened KL, firm top-1 agreement and the firm greedy continuation
//! (thresholds and definitions in `plumb_testutil::golden`). Each prompt's measurements are
//! printed as a table row; run with `--nocapture` to see them.

use plumb_backend_ref::RefBackend;
use plumb_model::{KvConfig, LogitsFor, Model};
use plumb_testutil::golden::{
    check_every_prompt, score_teacher_forced, teacher_forced_len, GoldenLogits, GoldenPrompt,
    Scorecard,
};
use plumb_testutil::{require_model, require_shared};

/// Tokens per forward pass; bounds the logits held at once (gemma3: 128 × 262144 floats).
const CHUNK: usize = 128;

fn score(model: &Model<RefBackend>, prompt: &GoldenPrompt) -> Scorecard {
    let mut cache = model
        .new_kv_cache(KvConfig {
            n_ctx: teacher_forced_len(prompt),
            n_seq: 1,
            max_batch: CHUNK,
        })
        .unwrap();
    score_teacher_forced(prompt, CHUNK, |tokens| {
        let logits = model.eval(&mut cache, 0, tokens, LogitsFor::All).unwrap();
        logits.rows().map(<[f32]>::to_vec).collect()
    })
}

fn check_model(name: &str) {
    let model_path = require_model!(name);
    let golden_path = require_shared!(&format!("golden/{name}/logits.gguf"));
    let golden = GoldenLogits::open(&golden_path).unwrap();
    let model = Model::load(&model_path, RefBackend::new()).unwrap();
    assert_eq!(model.hparams().n_vocab, golden.n_vocab);
    check_every_prompt(name, &golden, |prompt| score(&model, prompt));
}

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("smollm2-135m");
}

#[test]
fn qwen2_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma3-270m");
}
