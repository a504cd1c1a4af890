//! Any backend against llama.cpp's golden logits: every golden prompt teacher-forced through
//! the model in chunks, scored as `plumb_testutil::golden` defines. The cpu backend's golden
//! tests and the cuda backend's include this file.

use plumb_model::{Backend, KvConfig, LogitsFor, Model};
use plumb_testutil::golden::{
    check_every_prompt, score_teacher_forced, teacher_forced_len, GoldenLogits, GoldenPrompt,
    Scorecard,
};
use plumb_testutil::{require_model, testdata};

/// Tokens per forward pass; bounds the logits held at once (gemma3: 128 × 262144 floats).
const CHUNK: usize = 128;
/// The context of llama.cpp's golden runs (tools/reference/llama_session.py): phi3 picks its
/// RoPE factors by the context a sequence may hold, so the cache has at least as much.
const GOLDEN_N_CTX: usize = 1024;

fn score<B: Backend>(model: &Model<B>, prompt: &GoldenPrompt) -> Scorecard {
    let n_ctx = teacher_forced_len(prompt).max(GOLDEN_N_CTX);
    let mut cache = model.new_kv_cache(KvConfig::new(n_ctx, 1, CHUNK)).unwrap();
    score_teacher_forced(prompt, CHUNK, |tokens| {
        let logits = model.eval(&mut cache, 0, tokens, LogitsFor::All).unwrap();
        logits.rows().map(<[f32]>::to_vec).collect()
    })
}

/// Checks model `name` on `backend` against its golden logits, counting top-1 choices as
/// firm from `firm_margin` on. Skips loudly without the model.
pub fn check_model<B: Backend>(name: &str, backend: B, firm_margin: f32) {
    let model_path = require_model!(name);
    let golden_path = testdata(&format!("golden/{name}/logits.gguf"));
    let golden = GoldenLogits::open(&golden_path).unwrap();
    let label = format!("{name} ({})", backend.name());
    let model = Model::load(&model_path, backend).unwrap();
    check_loaded(&label, &model, &golden, firm_margin);
}

/// Checks a loaded model against golden logits, counting top-1 choices as firm from
/// `firm_margin` on; `label` names it in the table and in failures.
pub fn check_loaded<B: Backend>(
    label: &str,
    model: &Model<B>,
    golden: &GoldenLogits,
    firm_margin: f32,
) {
    assert_eq!(model.hparams().n_vocab, golden.n_vocab);
    check_every_prompt(label, golden, firm_margin, |prompt| score(model, prompt));
}
