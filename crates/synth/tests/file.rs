//! Files written for the tiny shape: they read back as planned, hold weights of the intended
//! size, depend on the seed alone, and plumb runs them.

use std::path::{Path, PathBuf};

use plumb_backend_ref::RefBackend;
use plumb_gguf::{GgmlType, GgufFile};
use plumb_model::{argmax, KvConfig, LogitsFor, Model};
use plumb_synth::{metadata, plan, write_model, FileType, Options, Shape, TINY};
use plumb_tokenizer::Tokenizer;

fn write(
    dir: &Path,
    name: &str,
    shape: Shape,
    file_type: FileType,
    seed: u64,
    threads: usize,
) -> PathBuf {
    let path = dir.join(name);
    let options = Options {
        shape,
        file_type,
        seed,
        threads,
    };
    let mut reported = 0;
    write_model(&options, &path, |n| reported += n).unwrap();
    let data: u64 = plan(&shape, file_type).iter().map(|t| t.data_bytes()).sum();
    assert_eq!(reported, data, "progress counts every data byte");
    path
}

#[test]
fn every_file_type_reads_back_as_planned() {
    let dir = tempfile::tempdir().unwrap();
    for file_type in FileType::ALL {
        let path = write(dir.path(), "m.gguf", TINY, file_type, 7, 2);
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.metadata(), &metadata(&TINY, file_type));
        let planned = plan(&TINY, file_type);
        assert_eq!(f.tensors().len(), planned.len());
        for (info, t) in f.tensors().iter().zip(&planned) {
            assert_eq!(
                (&info.name, info.ggml_type, &info.shape),
                (&t.spec.name, t.spec.ggml_type, &t.spec.shape)
            );
        }
        let types = |ty| f.tensors().iter().filter(|t| t.ggml_type == ty).count();
        if file_type == FileType::Q4_K_M {
            // Four layers: 2 and 3 get more bits, for attn_v and ffn_down.
            assert_eq!((types(GgmlType::Q6_K), types(GgmlType::Q4_K)), (5, 25));
        }
        assert!(!dir.path().join("m.gguf.partial").exists());
    }
}

/// Mean and standard deviation.
fn moments(values: &[f32]) -> (f32, f32) {
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / n;
    (mean as f32, var.sqrt() as f32)
}

#[test]
fn matrices_are_centred_with_std_0_02_and_norms_are_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.gguf", TINY, FileType::Q8_0, 1, 2);
    let f = GgufFile::open(&path).unwrap();
    for info in f.tensors() {
        let bytes = f.tensor_bytes(&info.name).unwrap();
        let values = plumb_ggml::dequantize_row_to_vec(info.ggml_type, bytes).unwrap();
        if info.name.ends_with("norm.weight") {
            assert!(values.iter().all(|&v| v == 1.0), "{}", info.name);
        } else {
            let (mean, std) = moments(&values);
            assert!(mean.abs() < 1e-3, "{}: mean {mean}", info.name);
            assert!((std - 0.02).abs() < 1e-3, "{}: std {std}", info.name);
        }
    }
}

#[test]
fn the_bytes_depend_on_the_seed_alone() {
    let dir = tempfile::tempdir().unwrap();
    let read = |p: PathBuf| std::fs::read(p).unwrap();
    let one_thread = read(write(dir.path(), "a.gguf", TINY, FileType::Q4_K_M, 3, 1));
    let three_threads = read(write(dir.path(), "b.gguf", TINY, FileType::Q4_K_M, 3, 3));
    assert!(one_thread == three_threads, "same seed, different bytes");
    let other_seed = read(write(dir.path(), "c.gguf", TINY, FileType::Q4_K_M, 4, 3));
    assert_eq!(other_seed.len(), one_thread.len());
    assert!(other_seed != one_thread, "another seed, same bytes");

    // A model cut to fewer layers has the same weights in the layers it keeps.
    let full = GgufFile::open(dir.path().join("a.gguf")).unwrap();
    let cut = write(
        dir.path(),
        "d.gguf",
        TINY.with_layers(2).unwrap(),
        FileType::Q4_K_M,
        3,
        2,
    );
    let cut = GgufFile::open(cut).unwrap();
    for name in ["token_embd.weight", "blk.1.attn_q.weight", "output.weight"] {
        assert!(
            cut.tensor_bytes(name).unwrap() == full.tensor_bytes(name).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn plumb_loads_the_model_and_generates_with_finite_logits() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.gguf", TINY, FileType::Q4_K_M, 11, 2);
    let model = Model::load(&path, RefBackend::new()).unwrap();
    let tok = Tokenizer::from_gguf(model.metadata()).unwrap();
    let mut tokens = tok.encode("the quick brown fox", true, false).unwrap();
    let prompt_len = tokens.len();
    let mut cache = model.new_kv_cache(KvConfig::new(64, 1, 64)).unwrap();
    let mut next = model.eval(&mut cache, 0, &tokens, LogitsFor::Last).unwrap();
    for _ in 0..4 {
        let logits = next.last().unwrap();
        assert_eq!(logits.len(), TINY.n_vocab);
        assert!(logits.iter().all(|v| v.is_finite()), "{logits:?}");
        let (min, max) = logits
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        // Random weights of std 0.02 give logits of order one: spread, but not blown up.
        assert!(max - min > 0.1 && max - min < 100.0, "{min}..{max}");
        let id = argmax(logits) as u32;
        tokens.push(id);
        next = model.eval(&mut cache, 0, &[id], LogitsFor::Last).unwrap();
    }
    assert_eq!(tokens.len(), prompt_len + 4);
    tok.decode(&tokens[prompt_len..]).unwrap();
}
