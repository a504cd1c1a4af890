//! The tensors, types and metadata of every shape, checked against llama.cpp's rules and the
//! published shapes without writing any weights.

use std::collections::BTreeMap;

use plumb_gguf::GgmlType;
use plumb_synth::{
    metadata, plan, use_more_bits, FileType, Shape, SynthError, LLAMA2_7B, LLAMA3_8B,
    TINYLLAMA_1_1B,
};
use plumb_tokenizer::Tokenizer;

/// The layers whose attn_v and ffn_down Q4_K_M makes Q6_K: the first and last eighth of the
/// layers and every third one between, worked out by hand from llama.cpp's `use_more_bits`.
const Q6_K_LAYERS_OF_22: [usize; 10] = [0, 1, 4, 7, 10, 13, 16, 19, 20, 21];
const Q6_K_LAYERS_OF_32: [usize; 16] = [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31];

fn types_by_name(shape: &Shape, file_type: FileType) -> BTreeMap<String, GgmlType> {
    plan(shape, file_type)
        .into_iter()
        .map(|t| (t.spec.name, t.spec.ggml_type))
        .collect()
}

/// How many tensors have each type, as llama.cpp's loader prints them.
fn type_counts(shape: &Shape, file_type: FileType) -> BTreeMap<GgmlType, usize> {
    let mut counts = BTreeMap::new();
    for t in plan(shape, file_type) {
        *counts.entry(t.spec.ggml_type).or_default() += 1;
    }
    counts
}

#[test]
fn q4_k_m_gives_q6_k_to_the_output_and_the_use_more_bits_layers() {
    for (shape, q6_k_layers) in [
        (TINYLLAMA_1_1B, &Q6_K_LAYERS_OF_22[..]),
        (LLAMA2_7B, &Q6_K_LAYERS_OF_32[..]),
        (LLAMA3_8B, &Q6_K_LAYERS_OF_32[..]),
    ] {
        let types = types_by_name(&shape, FileType::Q4_K_M);
        let n = shape.name;
        assert_eq!(types["token_embd.weight"], GgmlType::Q4_K, "{n}");
        assert_eq!(types["output.weight"], GgmlType::Q6_K, "{n}");
        assert_eq!(types["output_norm.weight"], GgmlType::F32, "{n}");
        for il in 0..shape.n_layer {
            let more_bits = if q6_k_layers.contains(&il) {
                GgmlType::Q6_K
            } else {
                GgmlType::Q4_K
            };
            for (tensor, expected) in [
                ("attn_norm", GgmlType::F32),
                ("attn_q", GgmlType::Q4_K),
                ("attn_k", GgmlType::Q4_K),
                ("attn_v", more_bits),
                ("attn_output", GgmlType::Q4_K),
                ("ffn_norm", GgmlType::F32),
                ("ffn_gate", GgmlType::Q4_K),
                ("ffn_up", GgmlType::Q4_K),
                ("ffn_down", more_bits),
            ] {
                let name = format!("blk.{il}.{tensor}.weight");
                assert_eq!(types[&name], expected, "{n} {name}");
            }
        }
    }
    // The totals llama.cpp's loader reports for the real Q4_K_M files of these models.
    let counts = |shape: &Shape| type_counts(shape, FileType::Q4_K_M);
    use GgmlType::{F32, Q4_K, Q6_K};
    assert_eq!(
        counts(&TINYLLAMA_1_1B),
        BTreeMap::from([(F32, 45), (Q4_K, 135), (Q6_K, 21)])
    );
    for shape in [LLAMA2_7B, LLAMA3_8B] {
        assert_eq!(
            counts(&shape),
            BTreeMap::from([(F32, 65), (Q4_K, 193), (Q6_K, 33)])
        );
    }
}

#[test]
fn q4_0_q8_0_and_f16_change_only_the_output() {
    use GgmlType::{F16, F32, Q4_0, Q6_K, Q8_0};
    for shape in [TINYLLAMA_1_1B, LLAMA2_7B, LLAMA3_8B] {
        let n_matrices = 7 * shape.n_layer + 2;
        let n_norms = 2 * shape.n_layer + 1;
        let types = types_by_name(&shape, FileType::Q4_0);
        assert_eq!(types["output.weight"], Q6_K);
        assert_eq!(types["token_embd.weight"], Q4_0);
        assert_eq!(
            type_counts(&shape, FileType::Q4_0),
            BTreeMap::from([(F32, n_norms), (Q4_0, n_matrices - 1), (Q6_K, 1)])
        );
        assert_eq!(
            type_counts(&shape, FileType::Q8_0),
            BTreeMap::from([(F32, n_norms), (Q8_0, n_matrices)])
        );
        assert_eq!(
            type_counts(&shape, FileType::F16),
            BTreeMap::from([(F32, n_norms), (F16, n_matrices)])
        );
    }
}

#[test]
fn use_more_bits_matches_the_hand_worked_layers() {
    let layers = |n| (0..n).filter(|&i| use_more_bits(i, n)).collect::<Vec<_>>();
    assert_eq!(layers(22), Q6_K_LAYERS_OF_22);
    assert_eq!(layers(32), Q6_K_LAYERS_OF_32);
    assert_eq!(layers(2), [1]);
}

#[test]
fn tensors_have_the_published_shapes() {
    let shapes = |shape: &Shape| -> BTreeMap<String, Vec<u64>> {
        plan(shape, FileType::Q4_K_M)
            .into_iter()
            .map(|t| (t.spec.name, t.spec.shape))
            .collect()
    };
    let tiny = shapes(&TINYLLAMA_1_1B);
    assert_eq!(tiny.len(), 201);
    assert_eq!(tiny["token_embd.weight"], [2048, 32000]);
    assert_eq!(tiny["blk.0.attn_q.weight"], [2048, 2048]);
    assert_eq!(tiny["blk.21.attn_k.weight"], [2048, 256]);
    assert_eq!(tiny["blk.3.attn_v.weight"], [2048, 256]);
    assert_eq!(tiny["blk.3.attn_output.weight"], [2048, 2048]);
    assert_eq!(tiny["blk.3.ffn_gate.weight"], [2048, 5632]);
    assert_eq!(tiny["blk.3.ffn_up.weight"], [2048, 5632]);
    assert_eq!(tiny["blk.3.ffn_down.weight"], [5632, 2048]);
    assert_eq!(tiny["blk.3.ffn_norm.weight"], [2048]);
    assert_eq!(tiny["output.weight"], [2048, 32000]);

    let l2 = shapes(&LLAMA2_7B);
    assert_eq!(l2.len(), 291);
    assert_eq!(l2["blk.31.attn_k.weight"], [4096, 4096]);
    assert_eq!(l2["blk.31.ffn_down.weight"], [11008, 4096]);
    assert_eq!(l2["output.weight"], [4096, 32000]);

    let l3 = shapes(&LLAMA3_8B);
    assert_eq!(l3.len(), 291);
    assert_eq!(l3["blk.0.attn_v.weight"], [4096, 1024]);
    assert_eq!(l3["blk.0.ffn_up.weight"], [4096, 14336]);
    assert_eq!(l3["token_embd.weight"], [4096, 128256]);
}

#[test]
fn metadata_states_the_shape_and_llama_cpps_file_type() {
    let md = metadata(&LLAMA3_8B, FileType::Q4_K_M);
    assert_eq!(md.get_str("general.architecture").unwrap(), "llama");
    assert!(md
        .get_str("general.name")
        .unwrap()
        .starts_with("synthetic llama3-8b"));
    for (key, value) in [
        ("general.file_type", 15),
        ("llama.block_count", 32),
        ("llama.embedding_length", 4096),
        ("llama.feed_forward_length", 14336),
        ("llama.attention.head_count", 32),
        ("llama.attention.head_count_kv", 8),
        ("llama.rope.dimension_count", 128),
        ("llama.context_length", 8192),
        ("llama.vocab_size", 128256),
    ] {
        assert_eq!(md.get_u32(key).unwrap(), value, "{key}");
    }
    assert_eq!(md.get_f32("llama.rope.freq_base").unwrap(), 500000.0);
    assert_eq!(
        md.get_f32("llama.attention.layer_norm_rms_epsilon")
            .unwrap(),
        1e-5
    );
    let md = metadata(&TINYLLAMA_1_1B, FileType::F16);
    assert_eq!(md.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert_eq!(md.get_u32("llama.attention.head_count_kv").unwrap(), 4);
    for (file_type, number) in [
        (FileType::F16, 1),
        (FileType::Q4_0, 2),
        (FileType::Q8_0, 7),
        (FileType::Q4_K_M, 15),
    ] {
        let md = metadata(&TINYLLAMA_1_1B, file_type);
        assert_eq!(md.get_u32("general.file_type").unwrap(), number);
    }
}

#[test]
fn the_vocabulary_loads_in_plumbs_tokenizer_with_llamas_special_and_byte_tokens() {
    for shape in [TINYLLAMA_1_1B, LLAMA3_8B] {
        let md = metadata(&shape, FileType::Q4_K_M);
        let tok = Tokenizer::from_gguf(&md).unwrap();
        assert_eq!(tok.n_vocab(), shape.n_vocab);
        assert_eq!(
            (tok.unk_id(), tok.bos_id(), tok.eos_id()),
            (Some(0), Some(1), Some(2))
        );
        assert_eq!(tok.token_text(0), Some("<unk>"));
        for b in 0..=255u32 {
            assert_eq!(tok.token_id(&format!("<0x{b:02X}>")), Some(3 + b));
        }
        let text = "hello world, Ünïcode 😀 tabs\tand\nnewlines";
        let ids = tok.encode(text, true, false).unwrap();
        assert_eq!(ids[0], 1);
        // Lower-case words become pieces; the rest falls back to byte tokens.
        assert!(ids.contains(&tok.token_id("<0xF0>").unwrap()), "{ids:?}");
        let words = tok.encode("hello world", false, false).unwrap();
        assert!(
            words.len() <= 6 && words.iter().all(|&id| id > 258),
            "{words:?}"
        );
        assert_eq!(tok.decode(&ids[1..]).unwrap(), text);
        let types = md.get_i64_array("tokenizer.ggml.token_type").unwrap();
        assert_eq!(types[..4], [2, 3, 3, 6]);
        assert_eq!(types[258..260], [6, 1]);
    }
}

#[test]
fn layers_can_be_cut_and_names_must_be_known() {
    let two = TINYLLAMA_1_1B.with_layers(2).unwrap();
    assert_eq!((two.n_layer, two.n_embd), (2, 2048));
    let types = types_by_name(&two, FileType::Q4_K_M);
    assert_eq!(types["blk.0.attn_v.weight"], GgmlType::Q4_K);
    assert_eq!(types["blk.1.attn_v.weight"], GgmlType::Q6_K);
    assert!(!types.contains_key("blk.2.attn_v.weight"));

    let err = TINYLLAMA_1_1B.with_layers(23).unwrap_err().to_string();
    assert!(
        err.contains("has 22 layers") && err.contains("give 1 to 22"),
        "{err}"
    );
    assert!(matches!(
        LLAMA2_7B.with_layers(0),
        Err(SynthError::LayerCount { requested: 0, .. })
    ));

    assert_eq!(Shape::named("llama2-7b").unwrap(), LLAMA2_7B);
    let err = Shape::named("llama2-13b").unwrap_err().to_string();
    assert!(
        err.contains("\"llama2-13b\"") && err.contains("tinyllama-1.1b, llama2-7b, llama3-8b"),
        "{err}"
    );
    assert_eq!(FileType::named("q4_k_m").unwrap(), FileType::Q4_K_M);
    let err = FileType::named("q5_k_m").unwrap_err().to_string();
    assert!(err.contains("q4_k_m, q4_0, q8_0, f16"), "{err}");
}
