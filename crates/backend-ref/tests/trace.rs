//! Every intermediate llama.cpp recorded for the `short` prompt (`testdata/golden/<model>/
//! trace.gguf`) against the reference backend's observer output under the same name: same
//! shape, and a relative RMS difference within what llama.cpp's 8-bit activations explain.

use plumb_backend_ref::RefBackend;
use plumb_gguf::{GgmlType, GgufFile};
use plumb_model::{Batch, KvConfig, LogitsFor, Model, Recorder};
use plumb_testutil::{require_model, testdata};

/// The README expects 1e-3 to 4e-2 for an exact implementation; this leaves headroom while
/// still catching a wrong norm, scale, RoPE pairing or residual (those give O(1) errors).
const MAX_REL_RMS: f64 = 0.08;

fn rel_rms(ours: &[f32], theirs: &[f32]) -> f64 {
    let diff: f64 = ours
        .iter()
        .zip(theirs)
        .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
        .sum();
    let norm: f64 = theirs.iter().map(|b| f64::from(*b).powi(2)).sum();
    (diff / norm.max(1e-30)).sqrt()
}

fn check_trace(name: &str) {
    let model_path = require_model!(name);
    let trace_path = testdata(&format!("golden/{name}/trace.gguf"));
    let trace = GgufFile::open(&trace_path).unwrap();
    let tokens: Vec<u32> = trace
        .tensor_bytes("tokens")
        .unwrap()
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u32)
        .collect();

    let model = Model::load(&model_path, RefBackend::new()).unwrap();
    let mut cache = model
        .new_kv_cache(KvConfig::new(tokens.len(), 1, tokens.len()))
        .unwrap();
    let mut recorder = Recorder::new();
    let batch = Batch::sequence(0, 0, &tokens, LogitsFor::All);
    model
        .forward_observed(&batch, &mut cache, &mut recorder)
        .unwrap();

    let mut failures = Vec::new();
    for info in trace.tensors().iter().filter(|t| t.name != "tokens") {
        assert_eq!(info.ggml_type, GgmlType::F32, "{}", info.name);
        let Some(ours) = recorder.get(&info.name) else {
            failures.push(format!("{} was not observed", info.name));
            continue;
        };
        let shape: Vec<usize> = info.shape.iter().map(|&d| d as usize).collect();
        if ours.shape != shape {
            failures.push(format!(
                "{}: shape {:?}, llama.cpp {:?}",
                info.name, ours.shape, shape
            ));
            continue;
        }
        let theirs: Vec<f32> = trace
            .tensor_data(info)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let err = rel_rms(&ours.data, &theirs);
        eprintln!("{name:<18} {:<18} rel RMS {err:.5}", info.name);
        if err.is_nan() || err > MAX_REL_RMS {
            failures.push(format!("{}: relative RMS difference {err:.4}", info.name));
        }
    }
    assert!(failures.is_empty(), "{name}:\n{}", failures.join("\n"));
}

#[test]
fn smollm2_intermediates_match_llama_cpp() {
    check_trace("smollm2-135m");
}

#[test]
fn qwen2_intermediates_match_llama_cpp() {
    check_trace("qwen2.5-coder-0.5b");
}

#[test]
fn gemma3_intermediates_match_llama_cpp() {
    check_trace("gemma3-270m");
}
