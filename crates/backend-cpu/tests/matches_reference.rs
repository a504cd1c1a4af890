//! The cpu backend against the f32 reference, layer by layer, and against itself: the same
//! numbers on any thread count, and incremental decoding equal to recomputing the whole
//! sequence.

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_backend_ref::RefBackend;
use plumb_model::{Backend, Batch, KvConfig, LogitsFor, Model, Recorder};
use plumb_testutil::require_model;
use plumb_tokenizer::Tokenizer;
use plumb_verify::{diff, Tolerance, Trace, TraceInfo};

const PROMPT: &str = "The capital of France is Paris, and the capital of Italy is";

fn tokens(model_path: &std::path::Path) -> Vec<u32> {
    let file = plumb_gguf::GgufFile::open(model_path).unwrap();
    let tokenizer = Tokenizer::from_gguf(file.metadata()).unwrap();
    tokenizer.encode(PROMPT, true, false).unwrap()
}

fn trace<B: Backend>(model_path: &std::path::Path, backend: B, tokens: &[u32]) -> Trace {
    let model = Model::load(model_path, backend).unwrap();
    let mut cache = model
        .new_kv_cache(KvConfig {
            n_ctx: tokens.len(),
            n_seq: 1,
            max_batch: tokens.len(),
        })
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

/// Every named intermediate of the cpu backend, with each of `cache_types`, within the 8-bit
/// activation tolerance of the reference, as llama.cpp is.
fn check_layers(name: &str, cache_types: &[KvCacheType]) {
    let path = require_model!(name);
    let tokens = tokens(&path);
    let reference = trace(&path, RefBackend::new(), &tokens);
    for &cache_type in cache_types {
        let cpu = trace(&path, CpuBackend::new(2, cache_type).unwrap(), &tokens);
        let report = diff(&reference, &cpu, Tolerance::LLAMA_CPP);
        assert!(
            report.compared > 100,
            "{name}: only {} tensors compared",
            report.compared
        );
        if let Some(t) = report.first_divergence() {
            panic!(
                "{name}, {} cache: {} diverges (cosine {:?}, rel RMS {:?})",
                cache_type.name(),
                t.name,
                t.cosine,
                t.rel_rms_err
            );
        }
    }
}

const ALL_CACHE_TYPES: [KvCacheType; 3] = [KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0];

#[test]
fn smollm2_layers_match_the_reference() {
    check_layers("smollm2-135m", &ALL_CACHE_TYPES);
}

/// Not with a q8_0 cache: qwen2.5's first layer attends with scores near 160 that differ by
/// about 1 between positions, and 8-bit keys move them by that much (cosine 0.84 against f32
/// keys for that layer, the same in a numpy model of the arithmetic). llama.cpp's q8_0 cache
/// perturbs that layer as much (`l_out-0` cosine 0.978 against its f16 cache) but its later
/// layers recover (logits cosine 0.9993); plumb's do not yet (logits cosine 0.83). Known gap.
#[test]
fn qwen2_layers_match_the_reference() {
    check_layers("qwen2.5-coder-0.5b", &[KvCacheType::F32, KvCacheType::F16]);
}

#[test]
fn gemma3_layers_match_the_reference() {
    check_layers("gemma3-270m", &ALL_CACHE_TYPES);
}

/// Logits of the prompt in one batch, then of four decoded tokens, on `threads` threads.
fn run(path: &std::path::Path, threads: usize, tokens: &[u32], max_batch: usize) -> Vec<f32> {
    let model = Model::load(path, CpuBackend::new(threads, KvCacheType::F16).unwrap()).unwrap();
    let mut cache = model
        .new_kv_cache(KvConfig {
            n_ctx: tokens.len() + 4,
            n_seq: 1,
            max_batch,
        })
        .unwrap();
    let mut all = model
        .eval(&mut cache, 0, tokens, LogitsFor::All)
        .unwrap()
        .rows()
        .flatten()
        .copied()
        .collect::<Vec<_>>();
    for step in 0..4u32 {
        let logits = model
            .eval(&mut cache, 0, &[step + 100], LogitsFor::Last)
            .unwrap();
        all.extend(logits.last().unwrap());
    }
    all
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    let path = require_model!("smollm2-135m");
    let tokens = tokens(&path);
    let one = run(&path, 1, &tokens, 64);
    for threads in [2, 3, 5] {
        assert!(
            run(&path, threads, &tokens, 64) == one,
            "logits on {threads} threads differ from those on 1"
        );
    }
}

#[test]
fn incremental_decoding_equals_full_recomputation() {
    let path = require_model!("gemma3-270m");
    let tokens = tokens(&path);
    let batched = run(&path, 2, &tokens, 64);
    let one_by_one = run(&path, 2, &tokens, 1);
    let max_diff = batched
        .iter()
        .zip(&one_by_one)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        max_diff <= 1e-4,
        "token-by-token logits differ from batched ones by {max_diff}"
    );
}
