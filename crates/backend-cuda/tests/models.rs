//! Whole models on the CUDA backend against the f32 reference, layer by layer through
//! `plumb-verify`: tiny synthetic models of every architecture (no file needed), and the real
//! models where they are cached.

mod common;

use common::synthetic::{file_of, Synthetic, ARCHS};
use plumb_backend_cuda::CudaBackend;
use plumb_backend_ref::RefBackend;
use plumb_gguf::GgmlType;
use plumb_model::{Backend, Batch, KvConfig, LogitsFor, Model, Recorder};
use plumb_testutil::require_model;
use plumb_verify::{diff, Tolerance, Trace, TraceInfo};

const PROMPT: &str = "The capital of France is Paris, and the capital of Italy is";

/// Every named intermediate of one pass over `tokens` in a fresh cache.
fn trace<B: Backend>(model: &Model<B>, tokens: &[u32]) -> Trace {
    let mut cache = model
        .new_kv_cache(KvConfig::new(tokens.len(), 1, tokens.len()))
        .unwrap();
    let mut recorder = Recorder::new();
    let batch = Batch::sequence(0, 0, tokens, LogitsFor::All);
    model
        .forward_observed(&batch, &mut cache, &mut recorder)
        .unwrap();
    Trace {
        info: TraceInfo::default(),
        tokens: tokens.iter().map(|&t| t as i32).collect(),
        tensors: recorder.tensors,
    }
}

/// Fails at the first intermediate of `cuda` outside `tolerance` of `reference`.
fn check_traces(what: &str, reference: &Trace, cuda: &Trace, tolerance: Tolerance) {
    let report = diff(reference, cuda, tolerance);
    assert!(
        report.compared >= 10,
        "{what}: only {} tensors compared",
        report.compared
    );
    if let Some(t) = report.first_divergence() {
        panic!(
            "{what}: {} diverges (cosine {:?}, rel RMS {:?})",
            t.name, t.cosine, t.rel_rms_err
        );
    }
}

/// Tokens spread over the synthetic vocabulary of 64.
fn tokens(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7 + seed * 13 + 1) % 64)
        .collect()
}

/// f32 activations and weights differ from the reference only by the f16 cache and the
/// order of sums: far inside llama.cpp's tolerance.
const SYNTHETIC: Tolerance = Tolerance {
    max_rel_rms: 0.01,
    min_cosine: 0.9999,
};

#[test]
fn synthetic_models_match_the_reference_layer_by_layer() {
    // One backend per model: a model owns its backend.
    let mut cuda = Some(require_cuda!());
    for arch in ARCHS {
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Q8_0] {
            let spec = Synthetic {
                matrix_type: ty,
                ..Synthetic::tiny(arch)
            };
            let file = file_of(&spec.writer(7));
            let reference = Model::from_file(file.clone(), RefBackend::new()).unwrap();
            let backend = cuda.take().map_or_else(|| CudaBackend::new(0), Ok).unwrap();
            let model = Model::from_file(file, backend).unwrap();
            let tokens = tokens(1, 23);
            let tolerance = if ty == GgmlType::Q8_0 {
                Tolerance::LLAMA_CPP
            } else {
                SYNTHETIC
            };
            check_traces(
                &format!("{arch} with {ty} matrices"),
                &trace(&reference, &tokens),
                &trace(&model, &tokens),
                tolerance,
            );
        }
    }
}

/// Decoding token by token, batches of several sequences in scattered blocks, and one pass
/// over the whole sequence all give the same logits (to the f16 cache's rounding): the
/// positions, slots and windows of every path agree.
#[test]
fn decoding_and_batches_of_sequences_agree_with_one_pass() {
    let mut cuda = Some(require_cuda!());
    for arch in ARCHS {
        let backend = cuda.take().map_or_else(|| CudaBackend::new(0), Ok).unwrap();
        let model = Model::from_file(Synthetic::tiny(arch).file(7), backend).unwrap();
        let seqs = [tokens(1, 23), tokens(2, 17), tokens(3, 9)];
        let want: Vec<Vec<Vec<f32>>> = seqs
            .iter()
            .map(|s| {
                let mut cache = model
                    .new_kv_cache(KvConfig::new(s.len(), 1, s.len()))
                    .unwrap();
                let logits = model.eval(&mut cache, 0, s, LogitsFor::All).unwrap();
                logits.rows().map(<[f32]>::to_vec).collect()
            })
            .collect();
        let config = KvConfig::new(64, 6, 16).with_block_size(2);
        let mut cache = model.new_kv_cache(config).unwrap();
        // Blocks taken and given back first, so that the sequences get scattered ones.
        for (seq, len) in [(3, 9), (4, 14), (5, 5)] {
            model
                .eval(&mut cache, seq, &tokens(9, len), LogitsFor::Last)
                .unwrap();
        }
        for seq in [4, 3, 5] {
            cache.clear_seq(seq);
        }
        let mut next = [0; 3];
        let mut round = 0;
        while next.iter().zip(&seqs).any(|(&n, s)| n < s.len()) {
            let mut batch = Batch::new();
            for (seq, tokens) in seqs.iter().enumerate() {
                let take = (1 + (round + seq) % 4).min(tokens.len() - next[seq]);
                for (pos, &token) in tokens.iter().enumerate().skip(next[seq]).take(take) {
                    batch.push(token, seq, pos, true);
                }
                next[seq] += take;
            }
            let logits = model.forward(&batch, &mut cache).unwrap();
            for (i, place) in batch.places().iter().enumerate() {
                let got = logits.for_token(i).unwrap();
                let diff = common::synthetic::max_rel_diff(got, &want[place.seq][place.pos]);
                assert!(
                    diff <= 2e-3,
                    "{arch}: sequence {} position {} differs by {diff:e} from one pass",
                    place.seq,
                    place.pos
                );
            }
            round += 1;
        }
    }
}

/// A real model against the reference, every named intermediate within llama.cpp's own
/// tolerance.
fn check_real(name: &str) {
    let path = require_model!(name);
    let cuda = require_cuda!();
    let file = plumb_gguf::GgufFile::open(&path).unwrap();
    let tokens = plumb_tokenizer::Tokenizer::from_gguf(file.metadata())
        .unwrap()
        .encode(PROMPT, true, false)
        .unwrap();
    let reference = Model::load(&path, RefBackend::new()).unwrap();
    let model = Model::load(&path, cuda).unwrap();
    check_traces(
        name,
        &trace(&reference, &tokens),
        &trace(&model, &tokens),
        Tolerance::LLAMA_CPP,
    );
}

#[test]
fn smollm2_layers_match_the_reference() {
    check_real("smollm2-135m");
}

#[test]
fn qwen2_layers_match_the_reference() {
    check_real("qwen2.5-coder-0.5b");
}

#[test]
fn gemma3_layers_match_the_reference() {
    check_real("gemma3-270m");
}
