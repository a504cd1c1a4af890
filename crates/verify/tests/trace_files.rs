//! Trace files: plumb's writer round-trips, and llama.cpp's golden traces read in the same
//! format.

use plumb_model::ObservedTensor;
use plumb_testutil::testdata;
use plumb_verify::{diff, Tolerance, Trace, TraceError, TraceInfo};

#[test]
fn golden_traces_read_as_traces() {
    let path = testdata("golden/smollm2-135m/trace.gguf");
    let t = Trace::read(path).unwrap();
    assert_eq!(t.info.model_file.as_deref(), Some("smollm2-135m.gguf"));
    assert_eq!(t.tokens.len(), 5);
    assert_eq!(t.tensors[0].name, "inp_embd");
    assert_eq!(t.get("Qcur-0").unwrap().shape, [64, 9, 5]);
    assert_eq!(t.get("l_out-29").unwrap().shape, [576, 5]);
    assert_eq!(t.tensors.last().unwrap().name, "result_output");
    assert!(diff(&t, &t, Tolerance::SAME_ENGINE).agree());
}

#[test]
fn write_then_read() {
    let trace = Trace {
        info: TraceInfo {
            model_file: Some("m.gguf".into()),
            backend: Some("ref".into()),
            plumb_version: Some("0.1.0".into()),
            ..TraceInfo::default()
        },
        tokens: vec![1, 42, 7],
        tensors: vec![ObservedTensor {
            name: "l_out-0".into(),
            shape: vec![2, 3],
            data: vec![0.5, -1.0, 2.0, 3.0, f32::NAN, 0.0],
        }],
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.trace.gguf");
    trace.write(&path).unwrap();
    let back = Trace::read(&path).unwrap();
    assert_eq!(back.info, trace.info);
    assert_eq!(back.tokens, trace.tokens);
    assert_eq!(back.tensors[0].shape, [2, 3]);
    assert!(back.tensors[0].data[4].is_nan());
    assert_eq!(back.tensors[0].data[..4], trace.tensors[0].data[..4]);
}

#[test]
fn a_model_is_not_a_trace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut w = plumb_gguf::GgufWriter::new();
    w.set("general.architecture", "llama");
    w.write_file(&path).unwrap();
    let e = Trace::read(&path).unwrap_err();
    assert!(matches!(e, TraceError::NotATrace { .. }), "{e}");
    assert!(e.to_string().contains("m.gguf"), "{e}");
}
