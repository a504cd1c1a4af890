//! The wgpu backend against llama.cpp's golden logits, with the harness and thresholds every
//! backend is held to (`plumb_testutil::golden::check_model`). It computes in f32 as the
//! reference does (no 8-bit activations) with llama.cpp's f16 KV cache, so its top-1 choices
//! count as firm from the reference's margin, 0.5. Run with `--nocapture` to see each
//! prompt's measurements.

mod common;

use plumb_testutil::golden::{check_model, FIRM_MARGIN};

#[test]
fn smollm2_on_wgpu_matches_llama_cpp() {
    let gpu = require_gpu!();
    check_model("smollm2-135m", gpu, FIRM_MARGIN);
}

#[test]
fn gemma3_on_wgpu_matches_llama_cpp() {
    let gpu = require_gpu!();
    check_model("gemma3-270m", gpu, FIRM_MARGIN);
}
