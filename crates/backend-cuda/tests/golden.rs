//! The cuda backend against llama.cpp's golden logits, through the harness every backend
//! shares (`plumb_testutil::golden::check_model`): mean coarsened KL, firm top-1 agreement
//! and the firm greedy continuation (thresholds and definitions there). Its activations stay
//! f32, so its top-1 choices are held to the reference's firm margin of 0.5; only its f16 KV
//! cache and the f16 operands of its many-row products round more than the reference. Run
//! with `--nocapture` to see each prompt's table row.

mod common;

use plumb_testutil::golden::{check_model, FIRM_MARGIN};

#[test]
fn smollm2_on_cuda_matches_llama_cpp() {
    check_model("smollm2-135m", require_cuda!(), FIRM_MARGIN);
}

#[test]
fn qwen2_on_cuda_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b", require_cuda!(), FIRM_MARGIN);
}

#[test]
fn gemma3_on_cuda_matches_llama_cpp() {
    check_model("gemma3-270m", require_cuda!(), FIRM_MARGIN);
}
