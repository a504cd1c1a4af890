//! `plumb inspect` end to end: the summary of each shipped model against the figures in
//! `testdata/models.md`, and tensor dumps of files made with the GGUF writer.

mod common;
use common::plumb;

use std::path::Path;

use plumb_gguf::{GgmlType, GgufWriter};
use plumb_testutil::require_model;
use serde_json::Value as Json;

fn inspect_json(path: &Path) -> Json {
    let out = plumb(&["inspect", path.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Hyperparameters as the models README tabulates them.
struct Expected {
    arch: &'static str,
    layers: &'static str,
    n_embd: &'static str,
    heads: &'static str,
    head_dim: &'static str,
    ffn: &'static str,
    ctx: &'static str,
    vocab: &'static str,
    tokenizer: &'static str,
    chat_template: &'static str,
    bytes: u64,
    types: &'static [(&'static str, u64)],
}

fn check(name: &str, e: Expected) {
    let path = require_model!(name);
    let doc = inspect_json(&path);
    let a = &doc["architecture"];
    assert_eq!(a["architecture"], e.arch);
    assert_eq!(a["layers"], e.layers);
    assert_eq!(a["embedding width"], e.n_embd);
    assert_eq!(a["heads / kv heads"], e.heads);
    assert_eq!(a["head dim"], e.head_dim);
    assert_eq!(a["feed-forward width"], e.ffn);
    assert_eq!(a["context (train)"], e.ctx);
    assert_eq!(a["vocab"], e.vocab);
    assert_eq!(a["tokenizer"], e.tokenizer);
    assert_eq!(a["chat template"], e.chat_template);
    assert_eq!(doc["file_bytes"], e.bytes);
    for (ty, count) in e.types {
        assert_eq!(doc["totals_by_type"][ty]["tensors"], *count, "{name} {ty}");
    }
    let n_types = doc["totals_by_type"].as_object().unwrap().len();
    assert_eq!(n_types, e.types.len(), "{name}");

    let text = plumb(&["inspect", path.to_str().unwrap()]);
    assert!(text.status.success());
    let text = String::from_utf8(text.stdout).unwrap();
    for section in ["architecture:", "metadata:", "tensors:", "totals by type:"] {
        assert!(text.contains(section), "{section}");
    }
    assert!(text.contains("... ("), "long arrays are elided");
}

#[test]
fn smollm2_135m() {
    check(
        "smollm2-135m",
        Expected {
            arch: "llama",
            layers: "30",
            n_embd: "576",
            heads: "9 / 3",
            head_dim: "64",
            ffn: "1536",
            ctx: "8192",
            vocab: "49152",
            tokenizer: "gpt2 / pre smollm",
            chat_template: "present",
            bytes: 98_362_432,
            types: &[("Q4_1", 210), ("F32", 61), ("Q8_0", 1)],
        },
    );
}

#[test]
fn gemma3_270m() {
    check(
        "gemma3-270m",
        Expected {
            arch: "gemma3",
            layers: "18",
            n_embd: "640",
            heads: "4 / 1",
            head_dim: "256",
            ffn: "2048",
            ctx: "32768",
            vocab: "262144",
            tokenizer: "llama / pre default",
            chat_template: "none",
            bytes: 253_113_024,
            types: &[
                ("F32", 109),
                ("Q5_0", 81),
                ("Q4_K", 27),
                ("Q8_0", 10),
                ("Q6_K", 9),
            ],
        },
    );
}

#[test]
fn qwen2_5_coder_0_5b() {
    check(
        "qwen2.5-coder-0.5b",
        Expected {
            arch: "qwen2",
            layers: "24",
            n_embd: "896",
            heads: "14 / 2",
            head_dim: "64",
            ffn: "4864",
            ctx: "32768",
            vocab: "151936",
            tokenizer: "gpt2 / pre qwen2",
            chat_template: "present",
            bytes: 491_400_064,
            types: &[
                ("Q5_0", 133),
                ("F32", 121),
                ("Q8_0", 13),
                ("Q6_K", 12),
                ("Q4_K", 12),
            ],
        },
    );
}

/// A file with an F32 tensor of known values and a Q8_0 tensor whose values are exact in Q8_0.
fn synthetic(dir: &Path) -> std::path::PathBuf {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    let values: Vec<f32> = (0..96).map(|i| i as f32 - 40.0).collect();
    w.add_f32("a", &[32, 3], &values).unwrap();
    let mut q8 = Vec::new();
    for block in 0..2 {
        q8.extend(half::f16::from_f32(0.5).to_le_bytes());
        q8.extend((0..32).map(|i| (i as i8 - 16 + block as i8) as u8));
    }
    w.add_tensor("q", GgmlType::Q8_0, &[32, 2], q8).unwrap();
    let path = dir.join("synthetic.gguf");
    w.write_file(&path).unwrap();
    path
}

#[test]
fn tensor_values_rows_and_raw_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = synthetic(dir.path());
    let p = path.to_str().unwrap();

    let out = plumb(&["inspect", p, "--tensor", "a", "--rows", "1..3", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Json = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["values"][0][0], -8.0);
    assert_eq!(doc["values"][1][31], 55.0);
    assert_eq!(doc["values"].as_array().unwrap().len(), 2);

    let raw = dir.path().join("q.f32");
    let out = plumb(&[
        "inspect",
        p,
        "--tensor",
        "q",
        "--raw",
        raw.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&raw).unwrap();
    let floats: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let expected: Vec<f32> = (0..2)
        .flat_map(|b| (0..32).map(move |i| 0.5 * (i - 16 + b) as f32))
        .collect();
    assert_eq!(floats, expected);

    let out = plumb(&["inspect", p, "--tensor", "q"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("q Q8_0 [32, 2]"), "{text}");
    assert!(text.contains("row 1: -7.500000 -7.000000"), "{text}");
}

#[test]
fn errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = synthetic(dir.path());
    let p = path.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["inspect", p, "--tensor", "nope"],
            "missing tensor \"nope\"",
        ),
        (
            &["inspect", p, "--tensor", "a", "--rows", "2..9"],
            "rows 2..9 are out of range",
        ),
        (
            &["inspect", p, "--tensor", "a", "--rows", "3..1"],
            "empty row range",
        ),
        (&["inspect", "/nonexistent/x.gguf"], "/nonexistent/x.gguf"),
    ];
    for (args, needle) in cases {
        let out = plumb(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() - 10]).unwrap();
    let out = plumb(&["inspect", truncated.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("\"q\"") && err.contains("data section"),
        "{err}"
    );
}
