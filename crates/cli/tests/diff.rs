//! `plumb diff`: verdicts, the first divergent tensor, and exit codes 0 / 1 / 2.

mod common;
use common::plumb;

use std::path::Path;

use plumb_model::ObservedTensor;
use plumb_verify::{Trace, TraceInfo};

fn tensor(name: &str, data: Vec<f32>) -> ObservedTensor {
    ObservedTensor {
        name: name.into(),
        shape: vec![data.len()],
        data,
    }
}

fn write(dir: &Path, file: &str, tokens: Vec<i32>, tensors: Vec<ObservedTensor>) -> String {
    let path = dir.join(file);
    Trace {
        info: TraceInfo {
            model_file: Some("m.gguf".into()),
            ..TraceInfo::default()
        },
        tokens,
        tensors,
    }
    .write(&path)
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn layers(perturb: Option<(&str, f32)>) -> Vec<ObservedTensor> {
    [
        "inp_embd",
        "attn_norm-0",
        "Qcur-0",
        "l_out-0",
        "result_output",
    ]
    .iter()
    .map(|&name| {
        let mut data: Vec<f32> = (0..64).map(|i| (i as f32 * 0.37).sin()).collect();
        if let Some((bad, by)) = perturb {
            if name == bad || (name != "inp_embd" && name != "attn_norm-0" && bad == "Qcur-0") {
                data.iter_mut().step_by(2).for_each(|v| *v += by);
            }
        }
        tensor(name, data)
    })
    .collect()
}

#[test]
fn exit_codes_and_first_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = write(d, "a.gguf", vec![1, 2, 3], layers(None));
    let same = write(d, "same.gguf", vec![1, 2, 3], layers(None));
    let noisy = write(
        d,
        "noisy.gguf",
        vec![1, 2, 3],
        layers(Some(("Qcur-0", 0.01))),
    );
    let broken = write(
        d,
        "broken.gguf",
        vec![1, 2, 3],
        layers(Some(("Qcur-0", 0.5))),
    );

    let out = plumb(&["diff", &a, &same]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("agree: 5 tensors compared"));

    let out = plumb(&["diff", &a, &noisy]);
    assert_eq!(out.status.code(), Some(1), "same-engine default is tight");
    let out = plumb(&["diff", &a, &noisy, "--against", "llama.cpp"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = plumb(&["diff", &a, &broken, "--against", "llama.cpp"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("first divergence: Qcur-0"), "{text}");
    assert!(text.contains("produced by: Q projection"), "{text}");

    let out = plumb(&[
        "diff",
        &a,
        &broken,
        "--json",
        "--tolerance",
        "10",
        "--min-cosine",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["agree"], true);
    assert_eq!(doc["report"]["tensors"][2]["name"], "Qcur-0");
    assert!(doc["report"]["tensors"][2]["rel_rms_err"].as_f64().unwrap() > 0.1);

    let out = plumb(&["diff", &a, &broken, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["first_divergence"]["name"], "Qcur-0");
}

#[test]
fn cannot_compare_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let a = write(d, "a.gguf", vec![1, 2, 3], layers(None));
    let other_tokens = write(d, "t.gguf", vec![1, 2, 4], layers(None));
    let disjoint = write(d, "x.gguf", vec![1, 2, 3], vec![tensor("zzz", vec![1.0])]);
    let cases: [(&[&str], &str); 4] = [
        (&["diff", &a, &other_tokens], "different tokens"),
        (&["diff", &a, &disjoint], "no tensor name in common"),
        (&["diff", &a, "/nonexistent.gguf"], "/nonexistent.gguf"),
        (
            &["diff", &a, &a, "--against", "vllm"],
            "unknown tolerance preset \"vllm\"",
        ),
    ];
    for (args, needle) in cases {
        let out = plumb(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
