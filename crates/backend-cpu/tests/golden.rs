//! Both CPU backends against llama.cpp's golden logits, for every shipped model and golden
//! prompt: mean coarsened KL, firm top-1 agreement and the firm greedy continuation (thresholds
//! and definitions in `plumb_testutil::golden`). The reference runs in f32 and is held to the
//! README's firm margin of 0.5; the cpu backend runs with 2 threads, 8-bit activations and its
//! default f16 KV cache, and its top-1 choices count as firm from `FIRM_MARGIN_8BIT` (0.75) on,
//! the noise of its own summation orders (see there). Its table row still counts the misses at
//! 0.5. Each prompt's measurements
//! are printed as a table row; run with `--nocapture` to see them.
//!
//! The harness is `plumb_testutil::golden::check_model`, which every backend's golden test
//! shares; the reference backend's test lives here because this crate depends on the
//! reference anyway.

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_backend_ref::RefBackend;
use plumb_testutil::golden::{check_model, FIRM_MARGIN, FIRM_MARGIN_8BIT};

fn cpu() -> CpuBackend {
    CpuBackend::new(2, KvCacheType::F16).unwrap()
}

#[test]
fn smollm2_on_ref_matches_llama_cpp() {
    check_model("smollm2-135m", RefBackend::new(), FIRM_MARGIN);
}

#[test]
fn qwen2_on_ref_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b", RefBackend::new(), FIRM_MARGIN);
}

#[test]
fn gemma3_on_ref_matches_llama_cpp() {
    check_model("gemma3-270m", RefBackend::new(), FIRM_MARGIN);
}

#[test]
fn smollm2_on_cpu_matches_llama_cpp() {
    check_model("smollm2-135m", cpu(), FIRM_MARGIN_8BIT);
}

#[test]
fn qwen2_on_cpu_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b", cpu(), FIRM_MARGIN_8BIT);
}

#[test]
fn gemma3_on_cpu_matches_llama_cpp() {
    check_model("gemma3-270m", cpu(), FIRM_MARGIN_8BIT);
}
