//! The cuda backend against llama.cpp's golden logits, through the cpu backend's generic
//! harness: mean coarsened KL, firm top-1 agreement and the firm greedy continuation
//! (thresholds and definitions in `plumb_testutil::golden`). Its activations stay f32, so its
//! top-1 choices are held to the reference's firm margin of 0.5; only its f16 KV cache and
//! the f16 operands of its many-row products round more than the reference. Run with
//! `--nocapture` to see each prompt's table row.

mod common;
#[path = "../../backend-cpu/tests/golden/harness.rs"]
mod harness;

use harness::check_model;
use plumb_testutil::golden::FIRM_MARGIN;

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
