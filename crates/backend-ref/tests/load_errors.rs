//! Files that cannot be a model fail to load with a message naming what is wrong.

mod common;

use common::{file_of, with_key, Synthetic};
use plumb_backend_ref::RefBackend;
use plumb_gguf::GgmlType;
use plumb_model::Model;

fn load_error(writer: &plumb_gguf::GgufWriter) -> String {
    match Model::from_file(file_of(writer), RefBackend::new()) {
        Ok(_) => panic!("the model loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_tensor_is_named() {
    for arch in ["llama", "qwen2", "gemma3"] {
        let spec = Synthetic::tiny(arch);
        for missing in [
            "blk.1.ffn_up.weight",
            "output_norm.weight",
            "token_embd.weight",
        ] {
            let err = load_error(&spec.writer_with(1, |n| n != missing));
            assert!(err.contains(missing), "{arch}: {err}");
        }
    }
    let err = load_error(&Synthetic::tiny("qwen2").writer_with(1, |n| n != "blk.0.attn_k.bias"));
    assert!(err.contains("blk.0.attn_k.bias"), "{err}");
    let err = load_error(
        &Synthetic::tiny("gemma3").writer_with(1, |n| n != "blk.3.post_ffw_norm.weight"),
    );
    assert!(err.contains("blk.3.post_ffw_norm.weight"), "{err}");
}

#[test]
fn an_unknown_architecture_is_named() {
    let writer = with_key(
        Synthetic::tiny("llama").writer(1),
        "general.architecture",
        "mamba",
    );
    let err = load_error(&writer);
    assert!(err.contains("unknown architecture \"mamba\""), "{err}");
}

#[test]
fn a_shape_that_contradicts_the_metadata_is_named() {
    let writer = with_key(
        Synthetic::tiny("llama").writer(1),
        "llama.feed_forward_length",
        128u32,
    );
    let err = load_error(&writer);
    assert!(
        err.contains("blk.0.ffn_gate.weight")
            && err.contains("[64, 96]")
            && err.contains("[64, 128]"),
        "{err}"
    );
}

#[test]
fn a_tensor_the_architecture_does_not_use_is_named() {
    let mut writer = Synthetic::tiny("gemma3").writer(1);
    writer
        .add_f32("blk.0.attn_q.bias", &[64], &[0.0; 64])
        .unwrap();
    let err = load_error(&writer);
    assert!(
        err.contains("blk.0.attn_q.bias") && err.contains("gemma3"),
        "{err}"
    );
}

#[test]
fn a_missing_hyperparameter_is_named() {
    let mut writer = Synthetic::tiny("qwen2").writer(1);
    writer
        .metadata_mut()
        .remove("qwen2.attention.layer_norm_rms_epsilon");
    let err = load_error(&writer);
    assert!(
        err.contains("qwen2.attention.layer_norm_rms_epsilon"),
        "{err}"
    );
}

#[test]
fn a_truncated_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truncated.gguf");
    let bytes = Synthetic::tiny("llama").writer(1).to_bytes().unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1000]).unwrap();
    let err = match Model::load(&path, RefBackend::new()) {
        Ok(_) => panic!("a truncated model loaded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("truncated.gguf"), "{err}");
    assert!(
        err.contains("data section") || err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn a_weight_type_the_backend_cannot_dequantize_is_named() {
    let spec = Synthetic::tiny("llama");
    let mut writer = spec.writer_with(1, |n| n != "blk.0.attn_v.weight");
    writer
        .add_tensor(
            "blk.0.attn_v.weight",
            GgmlType::I8,
            &[64, 32],
            vec![0; 64 * 32],
        )
        .unwrap();
    let err = load_error(&writer);
    assert!(
        err.contains("blk.0.attn_v.weight") && err.contains("I8"),
        "{err}"
    );
}
