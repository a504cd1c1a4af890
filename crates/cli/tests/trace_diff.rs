//! `plumb trace` then `plumb diff` against llama.cpp's own hidden states
//! (`testdata/golden/<model>/trace.gguf`), and a deliberately broken model whose first divergent
//! tensor `plumb diff` must name.

mod common;
use common::plumb;

use std::path::{Path, PathBuf};
use std::process::Output;

use plumb_gguf::{GgufFile, GgufWriter};
use plumb_testutil::{require_model, testdata};
use plumb_verify::Trace;

const PROMPT: &str = "The capital of France is";

/// `plumb trace -m MODEL -p PROMPT` with more arguments.
fn plumb_trace(model: &Path, more: &[&str]) -> Output {
    let head = ["trace", "-m", model.to_str().unwrap(), "-p", PROMPT];
    plumb(&[&head[..], more].concat())
}

fn trace(model: &Path, out: &Path) {
    trace_on(model, "cpu", out);
}

fn trace_on(model: &Path, backend: &str, out: &Path) {
    let o = plumb_trace(model, &["-o", out.to_str().unwrap(), "--backend", backend]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn diff(a: &Path, b: &Path, preset: &str) -> (Option<i32>, serde_json::Value) {
    let o = plumb(&[
        "diff",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--against",
        preset,
        "--json",
    ]);
    let doc = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code(), doc)
}

/// Both backends' traces of the prompt against llama.cpp's.
fn matches_llama_cpp(name: &str) {
    let model = require_model!(name);
    let golden = testdata(&format!("golden/{name}/trace.gguf"));
    let dir = tempfile::tempdir().unwrap();
    let t_golden = Trace::read(&golden).unwrap();
    for backend in ["ref", "cpu"] {
        let ours = dir.path().join(format!("{backend}.trace.gguf"));
        trace_on(&model, backend, &ours);
        let t_ours = Trace::read(&ours).unwrap();
        assert_eq!(
            t_ours.tokens, t_golden.tokens,
            "same token ids as llama.cpp"
        );
        assert_eq!(t_ours.info.backend.as_deref(), Some(backend));
        assert_eq!(t_ours.info.model_sha256.as_ref().map(String::len), Some(64));
        let (code, doc) = diff(&golden, &ours, "llama.cpp");
        let worst = doc["report"]["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["rel_rms_err"].as_f64())
            .fold(0f64, f64::max);
        eprintln!("{name} ({backend}): worst relative RMS error against llama.cpp {worst:.3e}");
        assert_eq!(
            code,
            Some(0),
            "{name} ({backend}): {}",
            doc["first_divergence"]
        );
        assert_eq!(doc["report"]["compared"], t_golden.tensors.len());
    }
}

#[test]
fn smollm2_matches_llama_cpp_layer_by_layer() {
    matches_llama_cpp("smollm2-135m");
}

#[test]
fn gemma3_matches_llama_cpp_layer_by_layer() {
    matches_llama_cpp("gemma3-270m");
}

#[test]
fn qwen2_matches_llama_cpp_layer_by_layer() {
    matches_llama_cpp("qwen2.5-coder-0.5b");
}

/// A copy of `model` with one tensor's data zeroed.
fn with_zeroed_tensor(model: &Path, tensor: &str, out: &Path) {
    let file = GgufFile::open(model).unwrap();
    let mut w = GgufWriter::with_metadata(file.metadata().clone());
    for t in file.tensors() {
        let mut data = file.tensor_data(t).to_vec();
        if t.name == tensor {
            data.iter_mut().for_each(|b| *b = 0);
        }
        w.add_tensor(&t.name, t.ggml_type, &t.shape, data).unwrap();
    }
    w.write_file(out).unwrap();
}

#[test]
fn dropped_qwen2_bias_is_named_as_the_first_divergence() {
    let model = require_model!("qwen2.5-coder-0.5b");
    let golden = testdata("golden/qwen2.5-coder-0.5b/trace.gguf");
    let dir = tempfile::tempdir().unwrap();
    let broken_model: PathBuf = dir.path().join("no-q-bias.gguf");
    with_zeroed_tensor(&model, "blk.0.attn_q.bias", &broken_model);
    let (good, broken) = (dir.path().join("good.gguf"), dir.path().join("broken.gguf"));
    trace(&model, &good);
    trace(&broken_model, &broken);

    for (reference, preset) in [(&golden, "llama.cpp"), (&good, "same-engine")] {
        let (code, doc) = diff(reference, &broken, preset);
        assert_eq!(code, Some(1), "{preset}");
        assert_eq!(doc["first_divergence"]["name"], "Qcur-0", "{preset}");
        assert!(doc["first_divergence"]["op"]
            .as_str()
            .unwrap()
            .contains("bias"));
        assert_eq!(doc["report"]["tensors"][1]["name"], "attn_norm-0");
        assert_eq!(doc["report"]["tensors"][1]["verdict"], "agree");
    }
}

#[test]
fn stats_and_tensor_filter() {
    let model = require_model!("smollm2-135m");
    let o = plumb_trace(&model, &["--stats", "--tensors", "l_out-*, result_norm"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 30 + 1, "{text}");
    assert!(rows[0].starts_with("l_out-0 ") && rows[30].starts_with("result_norm "));
    assert!(!text.contains("suspicious"), "{text}");

    let o = plumb_trace(&model, &["--stats", "--tensors", "nope*"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no tensor name matches"));
}

#[test]
fn verify_compares_a_backend_with_the_reference() {
    let model = require_model!("smollm2-135m");
    let o = plumb(&["verify", "-m", model.to_str().unwrap(), "--backend", "ref"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("agree: 303 tensors compared"), "{text}");

    let o = plumb(&["verify", "-m", model.to_str().unwrap(), "--backend", "cpu"]);
    let text = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("agree: 303 tensors compared"), "{text}");
    assert!(text.contains("relative RMS error <= 2.0e-1"), "{text}");
    // The same-engine tolerance is far below 8-bit activation noise: asking for it must fail.
    let o = plumb(&[
        "verify",
        "-m",
        model.to_str().unwrap(),
        "--backend",
        "cpu",
        "--tolerance",
        "1e-3",
    ]);
    assert_eq!(o.status.code(), Some(1));

    let o = plumb(&["verify", "-m", model.to_str().unwrap(), "--backend", "tpu"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("possible values: cuda, cpu, ref, wgpu"));
}
