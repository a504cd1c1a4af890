//! The reference forward pass against llama.cpp's golden logits, for every shipped model and
//! golden prompt: mean coarsened KL, firm top-1 agreement and the firm greedy continuation
//! (thresholds and definitions in `plumb_testutil::golden`). Each prompt's measurements are
//! printed as a table row; run with `--nocapture` to see them.
//!
//! The prompt and llama.cpp's firm greedy tokens are fed in one teacher-forced run: the greedy
//! continuation matches up to step s exactly when the argmax after the prompt and the first s
//! greedy tokens is greedy token s, for every s.

use plumb_backend_ref::RefBackend;
use plumb_model::{KvConfig, LogitsFor, Model};
use plumb_testutil::golden::{GoldenLogits, GoldenPrompt, Scorecard};
use plumb_testutil::{require_model, require_shared};

/// Tokens per forward pass; bounds the logits held at once (gemma3: 128 × 262144 floats).
const CHUNK: usize = 128;

fn score(model: &Model<RefBackend>, prompt: &GoldenPrompt) -> Scorecard {
    let firm = prompt.firm_greedy();
    let n_prompt = prompt.tokens.len();
    // The last firm token's own logits are not compared, so it need not be fed.
    let fed: Vec<u32> = prompt
        .tokens
        .iter()
        .chain(firm.iter().take(firm.len().saturating_sub(1)))
        .copied()
        .collect();
    let mut cache = model
        .new_kv_cache(KvConfig {
            n_ctx: fed.len(),
            n_seq: 1,
            max_batch: CHUNK,
        })
        .unwrap();
    let mut card = Scorecard::new(prompt);
    for (c, chunk) in fed.chunks(CHUNK).enumerate() {
        let logits = model.eval(&mut cache, 0, chunk, LogitsFor::All).unwrap();
        for (r, row) in logits.rows().enumerate() {
            let i = c * CHUNK + r;
            if i < n_prompt {
                card.position(prompt, i, row);
            }
            if i + 1 >= n_prompt && i + 1 - n_prompt < firm.len() {
                card.greedy_step(prompt, i + 1 - n_prompt, row);
            }
        }
    }
    card
}

fn check_model(name: &str) {
    let model_path = require_model!(name);
    let golden_path = require_shared!(&format!("golden/{name}/logits.gguf"));
    let golden = GoldenLogits::open(&golden_path).unwrap();
    let model = Model::load(&model_path, RefBackend::new()).unwrap();
    assert_eq!(model.hparams().n_vocab, golden.n_vocab);

    let mut failures = Vec::new();
    for prompt in &golden.prompts {
        let start = std::time::Instant::now();
        let card = score(&model, prompt);
        eprintln!("{name:<18} {card} {:.1}s", start.elapsed().as_secs_f64());
        if let Err(failure) = card.check() {
            failures.push(failure);
        }
    }
    assert!(failures.is_empty(), "{name}: {}", failures.join("\n"));
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
