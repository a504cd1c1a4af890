//! Forward-pass behaviour on small synthetic models of each architecture: incremental decoding,
//! several sequences in one batch, the sliding window, and the cache's limits.

mod common;

use common::{file_of, full_pass, max_rel_diff, tiny_model, with_key, Synthetic, ARCHS};
use plumb_backend_ref::RefBackend;
use plumb_model::{Batch, KvConfig, LogitsFor, Model, ModelError};

const TOKENS: [u32; 12] = [1, 17, 5, 42, 9, 63, 0, 33, 12, 12, 50, 7];

fn cache(
    model: &Model<RefBackend>,
    n_ctx: usize,
    n_seq: usize,
    max_batch: usize,
) -> plumb_model::KvCache<RefBackend> {
    model
        .new_kv_cache(KvConfig::new(n_ctx, n_seq, max_batch))
        .unwrap()
}

#[test]
fn incremental_decoding_equals_full_recomputation() {
    for arch in ARCHS {
        let model = tiny_model(arch);
        let full = full_pass(&model, &TOKENS);
        // In blocks of 2 positions, with batches of at most 2, gemma3's local layers (window
        // 4) get a pool of 4 blocks, which the 12 tokens go around one and a half times.
        let config = KvConfig::new(TOKENS.len(), 1, 2).with_block_size(2);
        let mut c = model.new_kv_cache(config).unwrap();
        let prefill = model
            .eval(&mut c, 0, &TOKENS[..5], LogitsFor::Last)
            .unwrap();
        let diff = max_rel_diff(prefill.last().unwrap(), &full[4]);
        assert!(diff <= 1e-4, "{arch}: prefill logits differ by {diff}");
        for t in 5..TOKENS.len() {
            let step = model
                .eval(&mut c, 0, &TOKENS[t..=t], LogitsFor::Last)
                .unwrap();
            let diff = max_rel_diff(step.last().unwrap(), &full[t]);
            assert!(diff <= 1e-4, "{arch}: position {t} differs by {diff}");
        }
    }
}

#[test]
fn sequences_in_one_batch_do_not_see_each_other() {
    for arch in ARCHS {
        let model = tiny_model(arch);
        let (a, b) = (&TOKENS[..7], &TOKENS[3..]);
        let alone_a = full_pass(&model, a);
        let alone_b = full_pass(&model, b);

        // Both sequences at once, interleaved, after a first batch that puts them at
        // different positions.
        let mut c = cache(&model, 16, 2, 16);
        let mut first = Batch::new();
        first.push(a[0], 0, 0, false);
        first.push(a[1], 0, 1, false);
        first.push(b[0], 1, 0, false);
        model.forward(&first, &mut c).unwrap();
        let mut rest = Batch::new();
        let (mut ia, mut ib) = (2, 1);
        while ia < a.len() || ib < b.len() {
            if ia < a.len() {
                rest.push(a[ia], 0, ia, true);
                ia += 1;
            }
            if ib < b.len() {
                rest.push(b[ib], 1, ib, true);
                ib += 1;
            }
        }
        let logits = model.forward(&rest, &mut c).unwrap();
        for (i, place) in rest.places().iter().enumerate() {
            let alone = if place.seq == 0 { &alone_a } else { &alone_b };
            let diff = max_rel_diff(logits.for_token(i).unwrap(), &alone[place.pos]);
            assert!(
                diff <= 1e-4,
                "{arch}: sequence {} position {} differs by {diff}",
                place.seq,
                place.pos
            );
        }
        assert_eq!((c.seq_len(0), c.seq_len(1)), (a.len(), b.len()));
    }
}

#[test]
fn gemma3_local_layers_see_only_the_window() {
    let spec = Synthetic::tiny("gemma3");
    let windowed = Model::from_file(spec.file(7), RefBackend::new()).unwrap();
    let unwindowed = Model::from_file(
        file_of(&with_key(
            spec.writer(7),
            "gemma3.attention.sliding_window",
            1000u32,
        )),
        RefBackend::new(),
    )
    .unwrap();
    let a = full_pass(&windowed, &TOKENS);
    let b = full_pass(&unwindowed, &TOKENS);
    // Within the first 4 positions the window hides nothing; after them it must.
    for t in 0..4 {
        assert!(max_rel_diff(&a[t], &b[t]) <= 1e-6, "position {t}");
    }
    for t in 4..TOKENS.len() {
        assert!(max_rel_diff(&a[t], &b[t]) > 1e-3, "position {t}");
    }
}

#[test]
fn a_full_context_is_a_clear_error_and_changes_nothing() {
    let model = tiny_model("llama");
    let mut c = cache(&model, 4, 1, 8);
    model
        .eval(&mut c, 0, &TOKENS[..3], LogitsFor::Last)
        .unwrap();
    let err = model
        .eval(&mut c, 0, &TOKENS[3..5], LogitsFor::Last)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::ContextFull {
                seq: 0,
                len: 3,
                n_ctx: 4,
                requested: 2
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("full"), "{err}");
    assert_eq!(c.seq_len(0), 3);
    // The one position left still works, and clearing the sequence starts it over.
    model
        .eval(&mut c, 0, &TOKENS[3..4], LogitsFor::Last)
        .unwrap();
    c.clear_seq(0);
    model
        .eval(&mut c, 0, &TOKENS[..4], LogitsFor::Last)
        .unwrap();
}

#[test]
fn malformed_batches_are_rejected_with_the_reason() {
    let model = tiny_model("qwen2");
    let mut c = cache(&model, 8, 2, 4);
    let cases: [(Batch, &str); 5] = [
        (Batch::new(), "empty"),
        (
            Batch::sequence(0, 1, &[1, 2], LogitsFor::Last),
            "position 1, expected 0",
        ),
        (Batch::sequence(2, 0, &[1], LogitsFor::Last), "sequence 2"),
        (
            Batch::sequence(0, 0, &[1, 2, 3, 4, 5], LogitsFor::Last),
            "at most 4",
        ),
        (
            Batch::sequence(0, 0, &[64], LogitsFor::Last),
            "outside the vocabulary",
        ),
    ];
    for (batch, expected) in cases {
        let err = model.forward(&batch, &mut c).unwrap_err().to_string();
        assert!(err.contains(expected), "expected {expected:?} in: {err}");
    }
}

#[test]
fn observer_sees_every_name_in_order() {
    let model = tiny_model("gemma3");
    let mut c = cache(&model, 4, 1, 4);
    let mut recorder = plumb_model::Recorder::new();
    let batch = Batch::sequence(0, 0, &TOKENS[..3], LogitsFor::Last);
    model
        .forward_observed(&batch, &mut c, &mut recorder)
        .unwrap();
    let names: Vec<&str> = recorder.names().take(14).collect();
    assert_eq!(
        names,
        [
            "inp_embd",
            "attn_norm-0",
            "Qcur_normed-0",
            "Kcur_normed-0",
            "Qcur-0",
            "Kcur-0",
            "Vcur-0",
            "kqv_out-0",
            "attn_out-0",
            "attn_post_norm-0",
            "ffn_inp-0",
            "ffn_norm-0",
            "ffn_out-0",
            "ffn_post_norm-0",
        ]
    );
    assert_eq!(recorder.get("Qcur-0").unwrap().shape, [16, 4, 3]);
    assert_eq!(recorder.get("Vcur-0").unwrap().shape, [16, 2, 3]);
    assert_eq!(recorder.get("l_out-5").unwrap().shape, [64, 3]);
    // Only the last token asked for logits.
    assert_eq!(recorder.get("result_norm").unwrap().shape, [64, 1]);
    assert_eq!(recorder.get("result_output").unwrap().shape, [64, 1]);
}
