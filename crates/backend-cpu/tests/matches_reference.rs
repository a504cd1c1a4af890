//! The cpu backend against the f32 reference, layer by layer, and against itself: the same
//! numbers on any thread count, and incremental decoding equal to recomputing the whole
//! sequence (to within the backend's 8-bit rounding).

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_backend_ref::RefBackend;
use plumb_model::{Backend, Batch, KvConfig, LogitsFor, Model, Recorder};
use plumb_testutil::require_model;
use plumb_tokenizer::Tokenizer;
use plumb_verify::{diff, next_token_kl, Tolerance, Trace, TraceInfo};

const PROMPT: &str = "The capital of France is Paris, and the capital of Italy is";

fn tokens(model_path: &std::path::Path) -> Vec<u32> {
    let file = plumb_gguf::GgufFile::open(model_path).unwrap();
    let tokenizer = Tokenizer::from_gguf(file.metadata()).unwrap();
    tokenizer.encode(PROMPT, true, false).unwrap()
}

fn trace<B: Backend>(model_path: &std::path::Path, backend: B, tokens: &[u32]) -> Trace {
    let model = Model::load(model_path, backend).unwrap();
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

/// With a q8_0 cache the first layer is checked apart, below.
#[test]
fn qwen2_layers_match_the_reference() {
    check_layers("qwen2.5-coder-0.5b", &[KvCacheType::F32, KvCacheType::F16]);
}

/// qwen2.5's keys have a few channels (after their bias) a hundred times larger than the
/// rest, and its first layer attends with scores near 160 that differ by about 1 between
/// positions. 8-bit blocks of raw keys round the small channels away: that layer's attention
/// is 46% off (relative RMS) even with llama.cpp's rotation, and 57% without, so the q8_0
/// cache is not held to the per-tensor tolerance. What matters is that later layers recover,
/// as llama.cpp's do (its q8_0 logits have cosine 0.9993 against its f16 ones). Without the
/// Hadamard rotation of keys, queries, values and outputs (`kv_rotation.rs`) they do not:
/// a few positions grow false attention sinks and the logits' cosine falls to 0.83.
#[test]
fn qwen2_q8_0_cache_keeps_the_logits_of_an_f16_cache() {
    let path = require_model!("qwen2.5-coder-0.5b");
    let tokens = tokens(&path);
    let f16 = trace(
        &path,
        CpuBackend::new(2, KvCacheType::F16).unwrap(),
        &tokens,
    );
    let q8_0 = trace(
        &path,
        CpuBackend::new(2, KvCacheType::Q8_0).unwrap(),
        &tokens,
    );
    let report = diff(&f16, &q8_0, Tolerance::LLAMA_CPP);
    let logits = report
        .tensors
        .iter()
        .find(|t| t.name == "result_output")
        .expect("both traces have the logits");
    let (cosine, rel_rms) = (logits.cosine.unwrap(), logits.rel_rms_err.unwrap());
    assert!(
        cosine >= 0.998 && rel_rms <= 0.06,
        "q8_0 against f16 cache logits: cosine {cosine}, relative RMS {rel_rms}"
    );
}

/// Qwen2.5-Coder-1.5B's first token carries FFN activations in the thousands that cancel
/// against the residual stream in its last layers. Quantized to 8 bits in blocks with them,
/// their neighbours round to zero and the first position's distribution lands KL 4 to 6 from
/// exact math (llama.cpp's does too); split off and multiplied in f32 (`outliers.rs`), every
/// position stays within KL 0.05, through the prompt's GEMM and through decoding's one-token
/// products alike.
#[test]
fn qwen2_1_5b_first_token_outliers_keep_the_distributions_exact() {
    let path = require_model!("qwen2.5-coder-1.5b");
    let tokens = tokens(&path);
    for tokens in [&tokens[..], &tokens[..1]] {
        let reference = trace(&path, RefBackend::new(), tokens);
        let cpu = trace(&path, CpuBackend::new(2, KvCacheType::F16).unwrap(), tokens);
        if let Some(t) = diff(&reference, &cpu, Tolerance::LLAMA_CPP).first_divergence() {
            panic!(
                "{} tokens: {} diverges (cosine {:?}, rel RMS {:?})",
                tokens.len(),
                t.name,
                t.cosine,
                t.rel_rms_err
            );
        }
        let kl = next_token_kl(&reference, &cpu).expect("both traces have the logits");
        let (position, max) = kl.max().expect("at least one position");
        assert!(
            max <= 0.05,
            "{} tokens: position {position}'s distribution is KL {max} from the reference's",
            tokens.len()
        );
    }
}

#[test]
fn gemma3_layers_match_the_reference() {
    check_layers("gemma3-270m", &ALL_CACHE_TYPES);
}

/// Logits of the prompt in one batch, then of four decoded tokens, on `threads` threads.
fn run(path: &std::path::Path, threads: usize, tokens: &[u32], max_batch: usize) -> Vec<f32> {
    let model = Model::load(path, CpuBackend::new(threads, KvCacheType::F16).unwrap()).unwrap();
    let mut cache = model
        .new_kv_cache(KvConfig::new(tokens.len() + 4, 1, max_batch))
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

/// Logits of every position, row by row, compared under `within`.
fn compare_positions(
    a: &[f32],
    b: &[f32],
    positions: usize,
    what: &str,
    within: impl Fn(usize, f64, f32),
) {
    let vocab = a.len() / positions;
    assert_eq!(a.len(), b.len(), "{what}: different numbers of logits");
    for (t, (a, b)) in a.chunks_exact(vocab).zip(b.chunks_exact(vocab)).enumerate() {
        let err: f64 = a.iter().zip(b).map(|(x, y)| f64::from(x - y).powi(2)).sum();
        let norm: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum();
        let max_diff = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        within(t, (err / norm).sqrt(), max_diff);
    }
}

/// Decoding token by token, and processing the prompt in batches of four (which go through
/// the same one-row-at-a-time matrix kernels), attend over the cache, the sliding window
/// included, exactly as each other: only the attention's tiling differs.
#[test]
fn incremental_decoding_equals_full_recomputation() {
    let path = require_model!("gemma3-270m");
    let tokens = tokens(&path);
    let batched = run(&path, 2, &tokens, 4);
    let one_by_one = run(&path, 2, &tokens, 1);
    compare_positions(
        &batched,
        &one_by_one,
        tokens.len() + 4,
        "batches of 4",
        |t, _, max_diff| {
            assert!(
                max_diff <= 1e-4,
                "position {t}: token-by-token logits differ from batched ones by {max_diff}"
            )
        },
    );
}

/// A whole prompt goes through the GEMM, which adds the same exact integer block sums as
/// decoding's kernels in a different order; the 8-bit quantization of later activations can
/// turn that rounding difference into a step of one quantum, and gemma3's last layers amplify
/// it. So the two agree to the backend's own noise against the reference (a few percent),
/// not bit for bit; a mistake in positions, masking or the cache moves logits by far more.
#[test]
fn one_batch_agrees_with_incremental_decoding() {
    let path = require_model!("gemma3-270m");
    let tokens = tokens(&path);
    let batched = run(&path, 2, &tokens, 64);
    let one_by_one = run(&path, 2, &tokens, 1);
    compare_positions(
        &batched,
        &one_by_one,
        tokens.len() + 4,
        "one batch",
        |t, rel_rms, _| {
            assert!(
            rel_rms <= 0.12,
            "position {t}: token-by-token logits differ from one batch's by relative RMS {rel_rms:.3e}"
        )
        },
    );
}
