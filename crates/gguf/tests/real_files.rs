//! The reader on real files: llama.cpp's test vectors and the shipped models.

use std::collections::BTreeMap;

use plumb_gguf::{GgmlType, GgufFile};
use plumb_testutil::{require_model, testdata};

fn count_by_type(f: &GgufFile) -> BTreeMap<GgmlType, usize> {
    let mut counts = BTreeMap::new();
    for t in f.tensors() {
        *counts.entry(t.ggml_type).or_default() += 1;
    }
    counts
}

#[test]
fn quant_vectors_file_has_every_type() {
    let path = testdata("quant/quant-vectors.gguf");
    let f = GgufFile::open(path).unwrap();
    let source = f.require_tensor("source").unwrap();
    assert_eq!(
        (source.ggml_type, source.shape.as_slice()),
        (GgmlType::F32, &[512, 16][..])
    );
    for t in f.tensors().iter().filter(|t| t.name.ends_with(".q")) {
        let type_name = t.name.trim_end_matches(".q");
        assert_eq!(t.ggml_type.name(), type_name);
        assert_eq!(t.shape, [512, 16]);
        let deq = f.require_tensor(&format!("{type_name}.f32")).unwrap();
        assert_eq!(deq.ggml_type, GgmlType::F32);
    }
    assert_eq!(
        f.tensors().len(),
        1 + 2 * 26,
        "source plus .q and .f32 for 26 types"
    );
}

/// Tensor counts by type and hyperparameters, as `testdata/models.md` lists them.
fn check_model(name: &str, arch: &str, expected: &[(GgmlType, usize)], layers: u32, n_embd: u32) {
    let path = require_model!(name);
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.file_size(), std::fs::metadata(&path).unwrap().len());
    let md = f.metadata();
    assert_eq!(md.architecture().unwrap(), arch);
    assert_eq!(
        md.get_u32(&md.arch_key("block_count").unwrap()).unwrap(),
        layers
    );
    assert_eq!(
        md.get_u32(&md.arch_key("embedding_length").unwrap())
            .unwrap(),
        n_embd
    );
    let expected: BTreeMap<GgmlType, usize> = expected.iter().copied().collect();
    assert_eq!(count_by_type(&f), expected, "{name}");
    let data_bytes: u64 = f.tensors().iter().map(|t| t.size).sum();
    assert!(data_bytes <= f.file_size() - f.header().data_offset);
}

#[test]
fn smollm2_135m() {
    use GgmlType::*;
    check_model(
        "smollm2-135m",
        "llama",
        &[(Q4_1, 210), (F32, 61), (Q8_0, 1)],
        30,
        576,
    );
}

#[test]
fn gemma3_270m() {
    use GgmlType::*;
    check_model(
        "gemma3-270m",
        "gemma3",
        &[(F32, 109), (Q5_0, 81), (Q4_K, 27), (Q8_0, 10), (Q6_K, 9)],
        18,
        640,
    );
}

#[test]
fn qwen2_5_coder_0_5b() {
    use GgmlType::*;
    check_model(
        "qwen2.5-coder-0.5b",
        "qwen2",
        &[(Q5_0, 133), (F32, 121), (Q8_0, 13), (Q6_K, 12), (Q4_K, 12)],
        24,
        896,
    );
}
