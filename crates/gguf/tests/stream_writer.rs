//! `GgufStreamWriter` writes the very bytes `GgufWriter` does, however the data is cut into
//! pieces, and refuses data that does not match the declared tensors.

use plumb_gguf::{GgmlType, GgufFile, GgufStreamWriter, GgufWriter, Metadata, TensorSpec};

fn metadata(alignment: Option<u32>) -> Metadata {
    let mut md = Metadata::new();
    md.set("general.architecture", "llama");
    md.set("t.strings", vec!["a".to_string(), "<0x0A>".to_string()]);
    if let Some(a) = alignment {
        md.set("general.alignment", a);
    }
    md
}

/// Tensors of odd sizes, so that most need padding, with one empty tensor among them.
fn tensors() -> Vec<(TensorSpec, Vec<u8>)> {
    let spec = |name: &str, ggml_type, shape: &[u64]| TensorSpec {
        name: name.to_owned(),
        ggml_type,
        shape: shape.to_vec(),
    };
    vec![
        (spec("a", GgmlType::F32, &[3, 5]), (0..60).collect()),
        (spec("b", GgmlType::Q4_0, &[64, 2]), (100..172).collect()),
        (spec("empty", GgmlType::F32, &[0]), vec![]),
        (spec("c", GgmlType::Q6_K, &[256]), vec![7; 210]),
        (spec("d", GgmlType::I8, &[3]), vec![1, 2, 3]),
    ]
}

fn in_memory(alignment: Option<u32>) -> Vec<u8> {
    let mut w = GgufWriter::with_metadata(metadata(alignment));
    for (spec, data) in tensors() {
        w.add_tensor(spec.name, spec.ggml_type, &spec.shape, data)
            .unwrap();
    }
    w.to_bytes().unwrap()
}

fn specs() -> Vec<TensorSpec> {
    tensors().into_iter().map(|(spec, _)| spec).collect()
}

fn all_data() -> Vec<u8> {
    tensors().into_iter().flat_map(|(_, data)| data).collect()
}

#[test]
fn streamed_file_equals_the_in_memory_writers_for_any_cut_of_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.gguf");
    for alignment in [None, Some(1), Some(64)] {
        for chunk in [1, 7, 64, 10_000] {
            let mut w = GgufStreamWriter::create(&path, &metadata(alignment), &specs()).unwrap();
            for piece in all_data().chunks(chunk) {
                w.write_data(piece).unwrap();
            }
            w.finish().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes, in_memory(alignment), "{alignment:?} {chunk}");
            let f = GgufFile::open(&path).unwrap();
            assert_eq!(f.tensor_bytes("c").unwrap(), vec![7; 210]);
            assert!(!dir.path().join("s.gguf.partial").exists());
        }
    }
}

#[test]
fn too_much_or_too_little_data_is_an_error_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.gguf");
    let partial = dir.path().join("s.gguf.partial");

    let mut w = GgufStreamWriter::create(&path, &metadata(None), &specs()).unwrap();
    let mut data = all_data();
    data.push(0);
    let err = w.write_data(&data).unwrap_err().to_string();
    assert!(err.contains("5 declared tensors"), "{err}");
    drop(w);
    assert!(!partial.exists() && !path.exists());

    let mut w = GgufStreamWriter::create(&path, &metadata(None), &specs()).unwrap();
    w.write_data(&all_data()[..100]).unwrap();
    assert!(partial.exists());
    let err = w.finish().unwrap_err().to_string();
    assert!(err.contains("\"b\" got 40 of its 72 bytes"), "{err}");
    assert!(!partial.exists() && !path.exists());
}

#[test]
fn bad_tensors_and_unwritable_paths_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.gguf");
    let mut twice = specs();
    twice.push(twice[0].clone());
    let err = GgufStreamWriter::create(&path, &metadata(None), &twice)
        .err()
        .unwrap();
    assert!(err.to_string().contains("\"a\" appears twice"), "{err}");

    let mut partial_block = specs();
    partial_block[3].shape = vec![100];
    let err = GgufStreamWriter::create(&path, &metadata(None), &partial_block)
        .err()
        .unwrap();
    assert!(err.to_string().contains("block size 256"), "{err}");

    let missing = dir.path().join("no/such/dir/s.gguf");
    let err = GgufStreamWriter::create(&missing, &metadata(None), &specs())
        .err()
        .unwrap();
    assert!(err.to_string().contains("no/such/dir/s.gguf"), "{err}");

    let err = GgufStreamWriter::create(dir.path(), &metadata(None), &specs())
        .err()
        .unwrap();
    assert!(err.to_string().contains("directory"), "{err}");
}
