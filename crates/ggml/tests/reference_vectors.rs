//! plumb-ggml against the numbers llama.cpp's own ggml computes (`testdata/quant-vectors.gguf`,
//! see its README): dequantization bit-exact, reference quantization byte-exact, and the
//! reference dot product against a dequantize-then-dot in f64.
//!
//! Run with `--nocapture` to see the per-type results table.

use plumb_ggml::{can_quantize, dequantize_row, dot_row, quantize_row_to_vec, GgmlType};
use plumb_gguf::GgufFile;

/// Every type the file holds `T.q` / `T.f32` for.
const TYPES_IN_FILE: [GgmlType; 26] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
    GgmlType::IQ2_XXS,
    GgmlType::IQ2_XS,
    GgmlType::IQ3_XXS,
    GgmlType::IQ1_S,
    GgmlType::IQ4_NL,
    GgmlType::IQ3_S,
    GgmlType::IQ2_S,
    GgmlType::IQ4_XS,
    GgmlType::IQ1_M,
    GgmlType::TQ1_0,
    GgmlType::TQ2_0,
    GgmlType::MXFP4,
];

/// The types whose `T.q` came from ggml's reference quantizer, so must be matched byte-exactly.
const REFERENCE_QUANTIZED: [GgmlType; 14] = [
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q8_K,
];

struct Vectors {
    file: GgufFile,
    row_len: usize,
    n_rows: usize,
}

impl Vectors {
    fn open(path: &std::path::Path) -> Self {
        let file = GgufFile::open(path).expect("quant-vectors.gguf opens");
        let info = file.require_tensor("source").expect("source tensor");
        assert_eq!(info.ggml_type, GgmlType::F32);
        let row_len = info.shape[0] as usize;
        let n_rows = (info.n_elements() / info.shape[0]) as usize;
        Vectors {
            file,
            row_len,
            n_rows,
        }
    }

    fn f32_tensor(&self, name: &str) -> Vec<f32> {
        let info = self.file.require_tensor(name).expect("tensor present");
        assert_eq!(info.ggml_type, GgmlType::F32, "{name}");
        let mut out = vec![0.0; info.n_elements() as usize];
        dequantize_row(GgmlType::F32, self.file.tensor_data(info), &mut out).expect("f32 data");
        out
    }

    fn quantized(&self, ty: GgmlType) -> &[u8] {
        let name = format!("{}.q", ty.name());
        let info = self.file.require_tensor(&name).expect("tensor present");
        assert_eq!(info.ggml_type, ty, "{name} has the type its name says");
        assert_eq!(info.shape[0] as usize, self.row_len, "{name} row length");
        self.file.tensor_data(info)
    }
}

fn same_bits(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn dequantization_is_bit_exact_with_ggml() {
    let path = plumb_testutil::testdata("quant/quant-vectors.gguf");
    let v = Vectors::open(&path);
    let mut failures = Vec::new();
    println!("type     dequant bit-exact");
    for ty in TYPES_IN_FILE {
        let expected = v.f32_tensor(&format!("{}.f32", ty.name()));
        let mut got = vec![0.0; expected.len()];
        let verdict = match dequantize_row(ty, v.quantized(ty), &mut got) {
            Err(e) => format!("no ({e})"),
            Ok(()) => {
                let bad: Vec<usize> = (0..got.len())
                    .filter(|&i| !same_bits(got[i], expected[i]))
                    .collect();
                match bad.first() {
                    None => "yes".to_string(),
                    Some(&i) => format!(
                        "no: {} of {} values differ, first at {i}: {:e} ({:#010x}) vs ggml {:e} ({:#010x})",
                        bad.len(),
                        got.len(),
                        got[i],
                        got[i].to_bits(),
                        expected[i],
                        expected[i].to_bits()
                    ),
                }
            }
        };
        println!("{:<8} {verdict}", ty.name());
        if verdict != "yes" {
            failures.push(ty.name());
        }
    }
    assert!(
        failures.is_empty(),
        "dequantization differs from ggml for {failures:?}"
    );
}

#[test]
fn reference_quantizers_are_byte_exact_with_ggml() {
    let path = plumb_testutil::testdata("quant/quant-vectors.gguf");
    let v = Vectors::open(&path);
    let source = v.f32_tensor("source");
    let mut failures = Vec::new();
    println!("type     quant byte-exact");
    for ty in REFERENCE_QUANTIZED {
        assert!(can_quantize(ty), "{ty} must have a reference quantizer");
        let expected = v.quantized(ty);
        let got = quantize_row_to_vec(ty, &source).expect("quantizes");
        assert_eq!(got.len(), expected.len(), "{ty} output size");
        let block_bytes = ty.block_bytes();
        let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != expected[i]).collect();
        let verdict = match bad.first() {
            None => "yes".to_string(),
            Some(&i) => {
                let mut blocks: Vec<usize> = bad.iter().map(|i| i / block_bytes).collect();
                blocks.dedup();
                format!(
                    "no: {} of {} bytes differ in {} blocks; first: block {} byte {}: {:#04x} vs ggml {:#04x}",
                    bad.len(),
                    got.len(),
                    blocks.len(),
                    i / block_bytes,
                    i % block_bytes,
                    got[i],
                    expected[i]
                )
            }
        };
        println!("{:<8} {verdict}", ty.name());
        if verdict != "yes" {
            failures.push(ty.name());
        }
    }
    assert!(
        failures.is_empty(),
        "reference quantization differs from ggml for {failures:?}"
    );
}

/// Deterministic activations with a spread of magnitudes and signs.
fn activations(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let t = (i as f32 + 1.0) * 0.618_034 + seed as f32 * 0.414_213_5;
            (t * 12.989_8).sin() * (1.0 + (i % 7) as f32)
        })
        .collect()
}

#[test]
fn dot_row_matches_dequantize_then_dot_on_every_row() {
    let path = plumb_testutil::testdata("quant/quant-vectors.gguf");
    let v = Vectors::open(&path);
    for ty in TYPES_IN_FILE {
        let weights = v.f32_tensor(&format!("{}.f32", ty.name()));
        let q = v.quantized(ty);
        let row_bytes = q.len() / v.n_rows;
        for r in 0..v.n_rows {
            let x = activations(v.row_len, r as u32);
            let w = &weights[r * v.row_len..(r + 1) * v.row_len];
            let expected: f64 = w
                .iter()
                .zip(&x)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let magnitude: f64 = w
                .iter()
                .zip(&x)
                .map(|(&a, &b)| f64::from(a * b).abs())
                .sum();
            let got = dot_row(ty, &q[r * row_bytes..(r + 1) * row_bytes], &x).expect("dot");
            let err = (f64::from(got) - expected).abs();
            assert!(
                err <= 1e-7 * magnitude + f64::from(f32::MIN_POSITIVE),
                "{ty} row {r}: dot_row {got} vs {expected} (magnitude {magnitude})"
            );
        }
    }
}
