//! The malformed-file corpus: each file is built here, byte by byte, with exactly one defect,
//! and must fail with the specific error that names it. Nothing is committed as a binary.

use plumb_gguf::{GgmlType, GgufError, GgufFile, GgufWriter};

/// A GGUF file assembled field by field, so a test can put any value in any field.
struct Raw {
    magic: [u8; 4],
    version: u32,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    kv: Vec<Vec<u8>>,
    tensors: Vec<Vec<u8>>,
    alignment: usize,
    data: Vec<u8>,
}

impl Raw {
    fn new() -> Self {
        Raw {
            magic: *b"GGUF",
            version: 3,
            n_tensors: None,
            n_kv: None,
            kv: vec![],
            tensors: vec![],
            alignment: 32,
            data: vec![],
        }
    }

    fn kv(mut self, key: &[u8], type_id: u32, value: &[u8]) -> Self {
        let mut e = string(key);
        e.extend(type_id.to_le_bytes());
        e.extend(value);
        self.kv.push(e);
        self
    }

    fn tensor(mut self, name: &str, shape: &[u64], type_id: u32, offset: u64) -> Self {
        let mut e = string(name.as_bytes());
        e.extend((shape.len() as u32).to_le_bytes());
        for d in shape {
            e.extend(d.to_le_bytes());
        }
        e.extend(type_id.to_le_bytes());
        e.extend(offset.to_le_bytes());
        self.tensors.push(e);
        self
    }

    fn data(mut self, len: usize) -> Self {
        self.data = vec![0; len];
        self
    }

    fn bytes(&self) -> Vec<u8> {
        let mut b = self.magic.to_vec();
        b.extend(self.version.to_le_bytes());
        b.extend(
            self.n_tensors
                .unwrap_or(self.tensors.len() as u64)
                .to_le_bytes(),
        );
        b.extend(self.n_kv.unwrap_or(self.kv.len() as u64).to_le_bytes());
        self.kv.iter().for_each(|e| b.extend(e));
        self.tensors.iter().for_each(|e| b.extend(e));
        while !b.len().is_multiple_of(self.alignment) {
            b.push(0);
        }
        b.extend(&self.data);
        b
    }

    fn parse(&self) -> Result<GgufFile, GgufError> {
        GgufFile::from_bytes(self.bytes())
    }
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s);
    b
}

const F32: u32 = 0;
const Q4_0: u32 = 2;
const STRING: u32 = 8;
const ARRAY: u32 = 9;
const U32: u32 = 4;
const BOOL: u32 = 7;

fn err(raw: &Raw) -> GgufError {
    match raw.parse() {
        Ok(_) => panic!("malformed file was accepted"),
        Err(e) => e,
    }
}

#[test]
fn a_wellformed_raw_file_parses() {
    let raw = Raw::new()
        .kv(b"general.architecture", STRING, &string(b"llama"))
        .tensor("w", &[32, 2], Q4_0, 0)
        .tensor("b", &[4], F32, 64)
        .data(96);
    let f = raw.parse().unwrap();
    assert_eq!(f.tensors().len(), 2);
    assert_eq!(f.metadata().architecture().unwrap(), "llama");
}

#[test]
fn bad_magic() {
    let mut raw = Raw::new();
    raw.magic = *b"GGML";
    assert!(matches!(err(&raw), GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn unsupported_versions() {
    for v in [0, 1, 4, 99] {
        let mut raw = Raw::new();
        raw.version = v;
        assert!(matches!(err(&raw), GgufError::UnsupportedVersion(x) if x == v));
    }
}

#[test]
fn big_endian_file() {
    let mut raw = Raw::new();
    raw.version = 3u32.swap_bytes();
    assert!(matches!(err(&raw), GgufError::BigEndian));
}

#[test]
fn huge_tensor_count_allocates_nothing() {
    let mut raw = Raw::new();
    raw.n_tensors = Some(1 << 60);
    assert!(matches!(
        err(&raw),
        GgufError::CountTooLarge { what, count, .. } if what == "tensor count" && count == 1 << 60
    ));
}

#[test]
fn huge_metadata_count_allocates_nothing() {
    let mut raw = Raw::new();
    raw.n_kv = Some(u64::MAX);
    assert!(matches!(err(&raw), GgufError::CountTooLarge { what, .. } if what == "metadata count"));
}

#[test]
fn huge_string_length_allocates_nothing() {
    let mut key = (1u64 << 40).to_le_bytes().to_vec();
    key.extend(b"abc");
    let mut raw = Raw::new();
    raw.n_kv = Some(1);
    raw.kv.push(key);
    assert!(matches!(
        err(&raw),
        GgufError::Truncated { what, needed, .. } if what == "metadata key #0" && needed == 1 << 40
    ));
}

#[test]
fn huge_array_count_allocates_nothing() {
    let mut value = STRING.to_le_bytes().to_vec();
    value.extend((1u64 << 61).to_le_bytes());
    let raw = Raw::new().kv(b"tokenizer.ggml.tokens", ARRAY, &value);
    assert!(matches!(
        err(&raw),
        GgufError::CountTooLarge { what, .. } if what.contains("tokenizer.ggml.tokens")
    ));
}

#[test]
fn deeply_nested_arrays_are_refused() {
    let mut value = Vec::new();
    for _ in 0..64 {
        value.extend(ARRAY.to_le_bytes());
        value.extend(1u64.to_le_bytes());
    }
    value.extend(U32.to_le_bytes());
    value.extend(0u64.to_le_bytes());
    let raw = Raw::new().kv(b"deep", ARRAY, &value);
    assert!(matches!(err(&raw), GgufError::WrongType { key, .. } if key == "deep"));
}

#[test]
fn unknown_value_type() {
    let raw = Raw::new().kv(b"x.y", 13, &[0; 8]);
    assert!(matches!(
        err(&raw),
        GgufError::UnknownValueType { key, type_id: 13 } if key == "x.y"
    ));
    let mut value = 99u32.to_le_bytes().to_vec();
    value.extend(0u64.to_le_bytes());
    let raw = Raw::new().kv(b"x.arr", ARRAY, &value);
    assert!(matches!(
        err(&raw),
        GgufError::UnknownValueType { key, type_id: 99 } if key == "x.arr"
    ));
}

#[test]
fn invalid_bool() {
    let raw = Raw::new().kv(b"flag", BOOL, &[2]);
    assert!(matches!(err(&raw), GgufError::WrongType { key, .. } if key == "flag"));
}

#[test]
fn invalid_utf8_key_and_value() {
    let raw = Raw::new().kv(b"bad\xff", U32, &[0; 4]);
    assert!(matches!(err(&raw), GgufError::InvalidUtf8 { what } if what == "metadata key #0"));
    let raw = Raw::new().kv(b"name", STRING, &string(b"\xc3("));
    assert!(matches!(err(&raw), GgufError::InvalidUtf8 { what } if what.contains("\"name\"")));
}

#[test]
fn invalid_utf8_tensor_name() {
    let mut raw = Raw::new().data(32);
    let mut e = string(b"\xfe");
    e.extend(1u32.to_le_bytes());
    e.extend(4u64.to_le_bytes());
    e.extend(F32.to_le_bytes());
    e.extend(0u64.to_le_bytes());
    raw.tensors.push(e);
    assert!(matches!(err(&raw), GgufError::InvalidUtf8 { what } if what == "name of tensor #0"));
}

#[test]
fn duplicate_key() {
    let raw = Raw::new()
        .kv(b"a", U32, &[1, 0, 0, 0])
        .kv(b"a", U32, &[2, 0, 0, 0]);
    assert!(matches!(err(&raw), GgufError::DuplicateKey(k) if k == "a"));
}

#[test]
fn duplicate_tensor() {
    let raw = Raw::new()
        .tensor("w", &[4], F32, 0)
        .tensor("w", &[4], F32, 32)
        .data(64);
    assert!(matches!(err(&raw), GgufError::DuplicateTensor(n) if n == "w"));
}

#[test]
fn unknown_tensor_type() {
    for id in [4, 31, 40, 0xFFFF_FFFF] {
        let raw = Raw::new().tensor("w", &[4], id, 0).data(32);
        assert!(matches!(
            err(&raw),
            GgufError::UnknownTensorType { tensor, type_id } if tensor == "w" && type_id == id
        ));
    }
}

#[test]
fn bad_dimension_counts() {
    for shape in [&[][..], &[1, 1, 1, 1, 1][..]] {
        let raw = Raw::new().tensor("w", shape, F32, 0).data(32);
        assert!(matches!(
            err(&raw),
            GgufError::BadDimCount { tensor, n_dims } if tensor == "w" && n_dims as usize == shape.len()
        ));
    }
}

#[test]
fn row_length_not_a_whole_number_of_blocks() {
    let raw = Raw::new().tensor("w", &[33, 2], Q4_0, 0).data(64);
    let e = err(&raw);
    assert!(matches!(&e, GgufError::BadShape { tensor, .. } if tensor == "w"));
    assert!(e.to_string().contains("block size 32"), "{e}");
}

#[test]
fn element_count_overflow() {
    let raw = Raw::new()
        .tensor("w", &[1 << 32, 1 << 32, 1 << 32], F32, 0)
        .data(32);
    let e = err(&raw);
    assert!(e.to_string().contains("overflows"), "{e}");
    let raw = Raw::new().tensor("w", &[1 << 62], F32, 0).data(32);
    assert!(matches!(err(&raw), GgufError::BadShape { tensor, .. } if tensor == "w"));
}

/// Found by the fuzzer: an empty tensor in a file that ends before its data section starts.
#[test]
fn empty_tensor_in_a_file_without_data_section() {
    let mut bytes = Raw::new().tensor("w", &[0], F32, 0).bytes();
    let header_end = 24 + (8 + 1) + 4 + 8 + 4 + 8;
    bytes.truncate(header_end + 2);
    let e = GgufFile::from_bytes(bytes).err().expect("rejected");
    assert!(
        matches!(&e, GgufError::Truncated { what, .. } if what.contains("data section")),
        "{e}"
    );
}

#[test]
fn misaligned_tensor_data() {
    let raw = Raw::new().tensor("w", &[4], F32, 8).data(64);
    assert!(matches!(
        err(&raw),
        GgufError::Misaligned { tensor, offset: 8, alignment: 32 } if tensor == "w"
    ));
}

#[test]
fn tensor_past_end_of_file() {
    let raw = Raw::new().tensor("w", &[64], F32, 0).data(100);
    assert!(matches!(
        err(&raw),
        GgufError::TensorOutOfBounds { tensor, end: 256, data_len: 100, .. } if tensor == "w"
    ));
    let raw = Raw::new().tensor("w", &[4], F32, u64::MAX - 31).data(64);
    assert!(matches!(err(&raw), GgufError::TensorOutOfBounds { tensor, .. } if tensor == "w"));
}

#[test]
fn overlapping_tensors() {
    let raw = Raw::new()
        .tensor("a", &[16], F32, 0)
        .tensor("b", &[16], F32, 32)
        .data(128);
    assert!(matches!(
        err(&raw),
        GgufError::OverlappingTensors { first, second } if first == "a" && second == "b"
    ));
}

#[test]
fn bad_alignment_values() {
    for a in [0u32, 3, 48] {
        let raw = Raw::new().kv(b"general.alignment", U32, &a.to_le_bytes());
        assert!(matches!(err(&raw), GgufError::BadAlignment(x) if x == u64::from(a)));
    }
    let raw = Raw::new().kv(b"general.alignment", STRING, &string(b"32"));
    assert!(matches!(err(&raw), GgufError::WrongType { key, .. } if key == "general.alignment"));
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set(
        "tokenizer.ggml.tokens",
        vec!["a".to_string(), "bc".to_string()],
    );
    w.add_tensor("w", GgmlType::Q8_0, &[32, 2], vec![1; 68])
        .unwrap();
    let bytes = w.to_bytes().unwrap();
    GgufFile::from_bytes(bytes.clone()).unwrap();
    for len in 0..bytes.len() {
        match GgufFile::from_bytes(bytes[..len].to_vec()) {
            Err(
                GgufError::Truncated { .. }
                | GgufError::CountTooLarge { .. }
                | GgufError::TensorOutOfBounds { .. },
            ) => {}
            Err(e) => panic!("prefix of {len} bytes: unexpected error {e}"),
            Ok(_) => panic!("prefix of {len} bytes was accepted"),
        }
    }
}

#[test]
fn open_names_the_missing_file() {
    let e = GgufFile::open("/nonexistent/model.gguf").err().unwrap();
    assert!(e.to_string().contains("/nonexistent/model.gguf"), "{e}");
}
