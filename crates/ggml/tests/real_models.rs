//! Every weight tensor of the real models dequantizes: each type they use has a kernel, and
//! the first row of every tensor is finite.

use plumb_ggml::{dequantize_row, dot_row, GgmlType};
use plumb_gguf::GgufFile;
use std::collections::BTreeSet;

fn check_model(path: &std::path::Path) {
    let file = GgufFile::open(path).expect("model opens");
    let mut types = BTreeSet::new();
    for info in file.tensors() {
        types.insert(info.ggml_type);
        let row_len = info.shape[0] as usize;
        let row_bytes = info.row_bytes() as usize;
        let row = &file.tensor_data(info)[..row_bytes];
        let mut out = vec![0.0f32; row_len];
        dequantize_row(info.ggml_type, row, &mut out)
            .unwrap_or_else(|e| panic!("{}: tensor {}: {e}", path.display(), info.name));
        assert!(
            out.iter().all(|v| v.is_finite()),
            "{}: tensor {} ({}) has non-finite values in row 0",
            path.display(),
            info.name,
            info.ggml_type
        );
        let ones = vec![1.0f32; row_len];
        let sum = dot_row(info.ggml_type, row, &ones).expect("dot");
        let expected: f64 = out.iter().map(|&v| f64::from(v)).sum();
        let magnitude: f64 = out.iter().map(|&v| f64::from(v).abs()).sum();
        assert!(
            (f64::from(sum) - expected).abs() <= 1e-6 * magnitude + 1e-30,
            "{}",
            info.name
        );
    }
    let names: Vec<&str> = types.iter().map(|t: &GgmlType| t.name()).collect();
    println!("{}: types {names:?}", path.display());
}

#[test]
fn smollm2_tensors_dequantize() {
    check_model(&plumb_testutil::require_model!("smollm2-135m"));
}

#[test]
fn gemma3_tensors_dequantize() {
    check_model(&plumb_testutil::require_model!("gemma3-270m"));
}

#[test]
fn qwen25_coder_tensors_dequantize() {
    check_model(&plumb_testutil::require_model!("qwen2.5-coder-0.5b"));
}
