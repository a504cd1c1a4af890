//! A model of TinyLlama's shape (22 layers, 2048 wide, 32 heads, 4 KV heads, FFN 5632, vocab
//! 32000) with random Q4_0 weights loads and runs: prefill and a decoding step, with finite
//! logits that agree between the incremental and the one-pass computation.

mod common;

use common::{max_rel_diff, Synthetic};
use plumb_backend_ref::RefBackend;
use plumb_gguf::GgmlType;
use plumb_model::{KvConfig, LogitsFor, Model};

#[test]
fn tinyllama_shape_loads_and_runs() {
    let spec = Synthetic {
        arch: "llama",
        n_vocab: 32000,
        n_embd: 2048,
        n_layer: 22,
        n_head: 32,
        n_head_kv: 4,
        head_dim: 64,
        n_ff: 5632,
        n_ctx_train: 2048,
        sliding_window: None,
        matrix_type: GgmlType::Q4_0,
        tied: false,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tinyllama-shape.gguf");
    spec.writer(3).write_file(&path).unwrap();

    let model = Model::load(&path, RefBackend::new()).unwrap();
    let hp = model.hparams();
    assert_eq!(
        (
            hp.n_layer,
            hp.n_embd,
            hp.n_head,
            hp.n_head_kv,
            hp.n_ff,
            hp.n_vocab
        ),
        (22, 2048, 32, 4, 5632, 32000)
    );

    let tokens = [1u32, 450, 7483, 310];
    let config = KvConfig::new(16, 1, 4);
    let mut cache = model.new_kv_cache(config).unwrap();
    let full = model.eval(&mut cache, 0, &tokens, LogitsFor::All).unwrap();
    assert_eq!(full.len(), 4);
    assert!(full.rows().flatten().all(|v| v.is_finite()));

    let mut cache = model.new_kv_cache(config).unwrap();
    model
        .eval(&mut cache, 0, &tokens[..3], LogitsFor::Last)
        .unwrap();
    let step = model
        .eval(&mut cache, 0, &tokens[3..], LogitsFor::Last)
        .unwrap();
    let diff = max_rel_diff(step.last().unwrap(), full.row(3));
    assert!(diff <= 1e-4, "decoding differs by {diff}");
}
