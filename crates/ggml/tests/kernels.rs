//! plumb-ggml without reference data: the dot product on random and extreme blocks, odd
//! block counts, rough round trips through every quantizer, and the error cases.

use plumb_ggml::{
    can_dequantize, can_quantize, dequantize_row, dequantize_row_to_vec, dot_row, quantize_row,
    quantize_row_to_vec, GgmlType, KernelError,
};

/// A small xorshift generator: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }

    /// Roughly N(0, 1): a sum of uniforms.
    fn normal(&mut self) -> f32 {
        let s: f64 = (0..4)
            .map(|_| (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        ((s - 2.0) * 3f64.sqrt()) as f32
    }
}

fn dequantizable() -> Vec<GgmlType> {
    GgmlType::ALL
        .into_iter()
        .filter(|&t| can_dequantize(t))
        .collect()
}

/// The dot product of the dequantized row with `x` in f64, and the sum of |products|.
fn reference_dot(ty: GgmlType, row: &[u8], x: &[f32]) -> (f64, f64) {
    let w = dequantize_row_to_vec(ty, row).expect("dequantizes");
    assert_eq!(w.len(), x.len());
    let products = w.iter().zip(x).map(|(&a, &b)| f64::from(a) * f64::from(b));
    (products.clone().sum(), products.map(f64::abs).sum())
}

fn assert_dot_agrees(ty: GgmlType, row: &[u8], x: &[f32], what: &str) {
    let got = dot_row(ty, row, x).expect("dot");
    let (expected, magnitude) = reference_dot(ty, row, x);
    // Non-finite products make the sum NaN or ±inf whatever the summation order, so those
    // cases must agree exactly; finite sums agree up to summation-order rounding.
    if expected.is_nan() {
        assert!(got.is_nan(), "{ty} {what}: {got} vs NaN");
    } else {
        let same = got.to_bits() == (expected as f32).to_bits();
        let err = (f64::from(got) - expected).abs();
        assert!(
            same || err <= 1e-7 * magnitude + 1e-30,
            "{ty} {what}: dot_row {got} vs {expected} (magnitude {magnitude})"
        );
    }
}

#[test]
fn dot_row_agrees_on_random_blocks_of_every_type() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for ty in dequantizable() {
        // Plain types get odd lengths that are not multiples of the 256-value step either.
        let counts: &[usize] = if ty.block_size() == 1 {
            &[1, 7, 255, 257, 1000]
        } else {
            &[1, 3, 7]
        };
        for &n_blocks in counts {
            let n = n_blocks * ty.block_size();
            for trial in 0..4 {
                let row = rng.bytes(n_blocks * ty.block_bytes());
                let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
                assert_dot_agrees(
                    ty,
                    &row,
                    &x,
                    &format!("{n_blocks} random blocks, trial {trial}"),
                );
            }
        }
    }
}

#[test]
fn dot_row_agrees_on_extreme_blocks() {
    let mut rng = Rng(42);
    for ty in dequantizable() {
        let n_blocks = 5;
        let n = n_blocks * ty.block_size();
        let n_bytes = n_blocks * ty.block_bytes();
        let random = rng.bytes(n_bytes);
        let rows: [(&str, Vec<u8>); 4] = [
            ("all-zero blocks (zero scales)", vec![0; n_bytes]),
            ("all-one bits (NaN scales)", vec![0xFF; n_bytes]),
            ("0x7B bytes (large finite scales)", vec![0x7B; n_bytes]),
            ("random", random),
        ];
        let activations: [(&str, Vec<f32>); 4] = [
            ("ones", vec![1.0; n]),
            (
                "huge",
                (0..n)
                    .map(|i| if i % 2 == 0 { 1e30 } else { -3e29 })
                    .collect(),
            ),
            ("tiny", (0..n).map(|i| 1e-30 * (i as f32 - 7.5)).collect()),
            ("zeros", vec![0.0; n]),
        ];
        for (row_name, row) in &rows {
            for (x_name, x) in &activations {
                assert_dot_agrees(ty, row, x, &format!("{row_name} · {x_name}"));
            }
        }
    }
}

#[test]
fn dot_row_of_known_blocks() {
    // Q8_0, d = 0.5: values 0.5·q for q = −16..15.
    let mut block = vec![0x00, 0x38];
    block.extend((-16i8..16).map(|q| q as u8));
    let x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let expected: f32 = (0..32).map(|i| 0.5 * (i as f32 - 16.0) * i as f32).sum();
    assert_eq!(dot_row(GgmlType::Q8_0, &block, &x).unwrap(), expected);

    // Q4_0, d = 2: byte j holds q_j (low) and q_{j+16} (high); values 2·(q − 8).
    let mut block = vec![0x00, 0x40];
    block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let w = dequantize_row_to_vec(GgmlType::Q4_0, &block).unwrap();
    let expected: Vec<f32> = (0..16)
        .map(|j| 2.0 * (j as f32 - 8.0))
        .chain((0..16).map(|j| 2.0 * (7.0 - j as f32)))
        .collect();
    assert_eq!(w, expected);
}

/// Round trips are not bit-exact by nature; this checks each quantizer on inputs other than
/// the reference file (including a single block) against a loose per-type error bound, so a
/// broken layout cannot hide.
#[test]
fn quantizers_round_trip_within_their_precision() {
    let mut rng = Rng(7);
    let bounds = [
        (GgmlType::F32, 0.0),
        (GgmlType::F16, 1e-3),
        (GgmlType::BF16, 8e-3),
        (GgmlType::Q8_0, 0.02),
        (GgmlType::Q8_1, 0.02),
        (GgmlType::Q8_K, 0.02),
        (GgmlType::Q6_K, 0.04),
        (GgmlType::Q5_0, 0.1),
        (GgmlType::Q5_1, 0.1),
        (GgmlType::Q5_K, 0.1),
        (GgmlType::Q4_0, 0.2),
        (GgmlType::Q4_1, 0.2),
        (GgmlType::Q4_K, 0.2),
        (GgmlType::Q3_K, 0.4),
        (GgmlType::Q2_K, 0.6),
    ];
    for (ty, bound) in bounds {
        assert!(can_quantize(ty), "{ty}");
        for n_blocks in [1, 2, 5] {
            let n = n_blocks * ty.block_size().max(32);
            let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
            let q = quantize_row_to_vec(ty, &x).expect("quantizes");
            assert_eq!(q.len() as u64, ty.row_bytes(n as u64).unwrap());
            let y = dequantize_row_to_vec(ty, &q).expect("dequantizes");
            let rms_x = (x.iter().map(|v| v * v).sum::<f32>() / n as f32).sqrt();
            let rms_err = (x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                / n as f32)
                .sqrt();
            assert!(
                rms_err <= bound * rms_x,
                "{ty}, {n_blocks} blocks: relative RMS error {}",
                rms_err / rms_x
            );
        }
    }
}

#[test]
fn only_the_documented_types_are_unsupported() {
    let not_dequantizable: Vec<_> = GgmlType::ALL
        .into_iter()
        .filter(|&t| !can_dequantize(t))
        .collect();
    assert_eq!(
        not_dequantizable,
        [
            GgmlType::I8,
            GgmlType::I16,
            GgmlType::I32,
            GgmlType::I64,
            GgmlType::F64
        ]
    );
    let quantizable: Vec<_> = GgmlType::ALL
        .into_iter()
        .filter(|&t| can_quantize(t))
        .collect();
    use GgmlType::*;
    assert_eq!(
        quantizable,
        [F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, BF16]
    );
}

#[test]
fn bad_lengths_and_types_are_errors_that_name_them() {
    let mut out = vec![0.0f32; 32];
    let err = dequantize_row(GgmlType::Q4_0, &[0; 17], &mut out).unwrap_err();
    assert_eq!(
        err,
        KernelError::ByteLength {
            ty: GgmlType::Q4_0,
            n_elements: 32,
            expected: 18,
            actual: 17
        }
    );
    assert_eq!(
        err.to_string(),
        "Q4_0 data for 32 elements must be 18 bytes, got 17"
    );

    let mut out = vec![0.0f32; 33];
    let err = dequantize_row(GgmlType::Q4_0, &[0; 18], &mut out).unwrap_err();
    assert_eq!(
        err.to_string(),
        "33 elements is not a whole number of Q4_0 blocks of 32 elements"
    );

    let err = dequantize_row(GgmlType::I32, &[0; 4], &mut [0.0]).unwrap_err();
    assert_eq!(err.to_string(), "I32 has no dequantize kernel");

    let err = quantize_row(GgmlType::IQ2_XXS, &[0.0; 256], &mut [0; 66]).unwrap_err();
    assert_eq!(err.to_string(), "IQ2_XXS has no reference quantize kernel");
    assert!(matches!(
        quantize_row(GgmlType::MXFP4, &[0.0; 32], &mut [0; 17]),
        Err(KernelError::UnsupportedType {
            ty: GgmlType::MXFP4,
            ..
        })
    ));

    let err = quantize_row(GgmlType::Q6_K, &[0.0; 256], &mut [0; 209]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Q6_K data for 256 elements must be 210 bytes, got 209"
    );
    assert!(matches!(
        quantize_row_to_vec(GgmlType::Q8_0, &[0.0; 40]),
        Err(KernelError::PartialBlock {
            ty: GgmlType::Q8_0,
            n_elements: 40,
            block_size: 32
        })
    ));

    let err = dot_row(GgmlType::Q8_0, &[0; 34], &[0.0; 31]).unwrap_err();
    assert!(matches!(err, KernelError::PartialBlock { .. }), "{err}");
    let err = dot_row(GgmlType::Q8_0, &[0; 34], &[0.0; 64]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Q8_0 data for 64 elements must be 68 bytes, got 34"
    );
    let err = dot_row(GgmlType::F64, &[0; 8], &[0.0]).unwrap_err();
    assert_eq!(err.to_string(), "F64 has no dot product kernel");

    // A trailing partial block is refused, not dropped.
    assert!(dequantize_row_to_vec(GgmlType::Q8_0, &[0; 35]).is_err());
}

#[test]
fn empty_rows_are_fine() {
    for ty in dequantizable() {
        assert_eq!(dot_row(ty, &[], &[]).unwrap(), 0.0);
        dequantize_row(ty, &[], &mut []).unwrap();
    }
}
