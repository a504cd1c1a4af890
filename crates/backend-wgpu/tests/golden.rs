//! The wgpu backend against llama.cpp's golden logits, with the harness and thresholds every
//! backend is held to (`plumb_testutil::golden`). It computes in f32 as the reference does,
//! with llama.cpp's f16 KV cache, but for Q4_K's decoding products, which round activations
//! to 8 bits (`WgpuBackend::quantizes_activations`). smollm2-135m (Q4_1) has no Q4_K, and its
//! top-1 choices count as firm from the reference's margin, 0.5; gemma3-270m's greedy
//! continuations decode through its Q4_K matrices, and count from the margin of backends with
//! 8-bit activations, 0.75. Run with `--nocapture` to see each prompt's measurements.
//!
//! On a GPU every golden prompt runs. On lavapipe (CI's Vulkan on the CPU) a forward pass
//! takes about a second a position, so there the two shortest run (`short` and `chat`: 5 to 37
//! positions and their greedy continuations, through the same kernels as the longer prompts:
//! every product of more than 4 tokens takes the 16-token matmul, attention the same kernel);
//! `code`, `paragraph` and `long` (81 to 749 positions, past gemma3's 512-token window) run on
//! GPUs. `code` was the one that took the attention kernel past its first tile of 64
//! positions: the kernel tests hold that, and the windowed attention, to the reference on
//! lavapipe (`attention_over_the_paged_cache_matches_the_reference`, 150 positions).

mod common;

use plumb_backend_wgpu::WgpuBackend;
use plumb_testutil::golden::{check_model, check_model_prompts, FIRM_MARGIN, FIRM_MARGIN_8BIT};

/// The golden prompts a CPU adapter runs.
const CPU_ADAPTER_PROMPTS: [&str; 2] = ["short", "chat"];

fn check(name: &str, gpu: WgpuBackend, firm_margin: f32) {
    if gpu.is_cpu() {
        plumb_testutil::skip(
            &format!("golden {name} paragraph and long (wgpu)"),
            &format!(
                "{} is a CPU adapter: only the prompts {CPU_ADAPTER_PROMPTS:?} run",
                gpu.adapter()
            ),
        );
        check_model_prompts(name, gpu, firm_margin, &CPU_ADAPTER_PROMPTS);
    } else {
        check_model(name, gpu, firm_margin);
    }
}

#[test]
fn smollm2_on_wgpu_matches_llama_cpp() {
    check("smollm2-135m", require_gpu!(), FIRM_MARGIN);
}

#[test]
fn gemma3_on_wgpu_matches_llama_cpp() {
    check("gemma3-270m", require_gpu!(), FIRM_MARGIN_8BIT);
}
