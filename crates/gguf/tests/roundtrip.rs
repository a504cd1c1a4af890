//! Files written by `GgufWriter` read back identically, for every value type and alignment.

use plumb_gguf::{Array, GgmlType, GgufFile, GgufWriter, Value, ValueType};

fn every_value_type() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(-1.5e-7)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo ▁ wörld".into())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.empty", Value::Array(Array::new(ValueType::U32, vec![]))),
        (
            "t.strings",
            Value::from(vec!["a".to_string(), String::new(), "<0x0A>".to_string()]),
        ),
        (
            "t.nested",
            Value::Array(Array::new(
                ValueType::Array,
                vec![
                    Value::from(vec![1i32, 2, 3]),
                    Value::Array(Array::new(ValueType::F64, vec![])),
                ],
            )),
        ),
    ]
}

fn sample_writer(alignment: Option<u32>) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    if let Some(a) = alignment {
        w.set("general.alignment", a);
    }
    for (k, v) in every_value_type() {
        w.set(k, v);
    }
    let f32s: Vec<f32> = (0..96).map(|i| i as f32 * 0.5 - 3.0).collect();
    w.add_f32("a.f32", &[32, 3], &f32s).unwrap();
    w.add_tensor("b.q4_0", GgmlType::Q4_0, &[64, 2], (0..72).collect())
        .unwrap();
    w.add_tensor("c.q6_k", GgmlType::Q6_K, &[256], vec![7; 210])
        .unwrap();
    w.add_tensor("d.i8", GgmlType::I8, &[3, 1, 1, 1], vec![1, 2, 3])
        .unwrap();
    w
}

#[test]
fn every_value_type_and_tensor_round_trips() {
    for alignment in [None, Some(1), Some(8), Some(64), Some(4096)] {
        let w = sample_writer(alignment);
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.header().alignment, u64::from(alignment.unwrap_or(32)));
        for (k, v) in every_value_type() {
            assert_eq!(f.metadata().get(k), Some(&v), "{k}");
        }
        let names: Vec<_> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a.f32", "b.q4_0", "c.q6_k", "d.i8"]);
        for t in f.tensors() {
            assert_eq!(t.offset % f.header().alignment, 0, "{}", t.name);
            assert_eq!(
                (f.header().data_offset + t.offset) % f.header().alignment,
                0,
                "{}",
                t.name
            );
        }
        let a = f.tensor_bytes("a.f32").unwrap();
        assert_eq!(&a[..8], &[0, 0, 0x40, 0xc0, 0, 0, 0x20, 0xc0]);
        assert_eq!(
            f.tensor_bytes("b.q4_0").unwrap(),
            (0..72).collect::<Vec<u8>>()
        );
        assert_eq!(f.tensor_bytes("c.q6_k").unwrap(), vec![7; 210]);
        assert_eq!(f.tensor_bytes("d.i8").unwrap(), [1, 2, 3]);
        let info = f.tensor_info("b.q4_0").unwrap();
        assert_eq!(
            (info.row_len(), info.n_rows(), info.row_bytes()),
            (64, 2, 36)
        );
    }
}

#[test]
fn writing_is_deterministic_and_rereading_rewrites_the_same_bytes() {
    let bytes = sample_writer(None).to_bytes().unwrap();
    assert_eq!(bytes, sample_writer(None).to_bytes().unwrap());
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let mut w = GgufWriter::with_metadata(f.metadata().clone());
    for t in f.tensors() {
        w.add_tensor(&t.name, t.ggml_type, &t.shape, f.tensor_data(t).to_vec())
            .unwrap();
    }
    assert_eq!(w.to_bytes().unwrap(), bytes);
}

#[test]
fn mapped_file_is_zero_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    sample_writer(None).write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    let a = f.tensor_bytes("a.f32").unwrap();
    let b = f.tensor_bytes("b.q4_0").unwrap();
    let (pa, pb) = (a.as_ptr() as usize, b.as_ptr() as usize);
    assert_eq!(pb - pa, f.tensor_info("b.q4_0").unwrap().offset as usize);
    assert_eq!(f.file_size(), std::fs::metadata(&path).unwrap().len());
    assert!(!dir.path().join("m.gguf.partial").exists());
}

#[test]
fn writer_rejects_inconsistent_tensors() {
    let mut w = GgufWriter::new();
    let err = w
        .add_tensor("x", GgmlType::Q4_0, &[32], vec![0; 17])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("\"x\"") && err.contains("18 bytes"), "{err}");
    let err = w
        .add_tensor("y", GgmlType::Q4_K, &[32], vec![])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("block size 256"), "{err}");
    w.add_tensor("z", GgmlType::F32, &[1], vec![0; 4]).unwrap();
    let err = w
        .add_tensor("z", GgmlType::F32, &[1], vec![0; 4])
        .err()
        .unwrap();
    assert!(err.to_string().contains("twice"), "{err}");
    let err = w
        .add_tensor("w", GgmlType::F32, &[1; 5], vec![0; 4])
        .err()
        .unwrap();
    assert!(err.to_string().contains("5 dimensions"), "{err}");
}

/// Writes the sample files as seeds for the fuzzer (`fuzz/seed.sh` sets PLUMB_FUZZ_SEED_DIR),
/// or to a temporary directory; either way each seed must read back.
#[test]
fn write_fuzz_seeds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("PLUMB_FUZZ_SEED_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_owned());
    for alignment in [None, Some(8)] {
        let path = dir.join(format!("sample-align{}.gguf", alignment.unwrap_or(32)));
        sample_writer(alignment).write_file(&path).unwrap();
        GgufFile::open(&path).unwrap();
    }
}
