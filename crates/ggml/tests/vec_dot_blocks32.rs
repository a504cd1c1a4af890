//! The 32-element-block family of `DotKernel`s (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL against
//! Q8_0/Q8_1 activations; F16, BF16, F32 against their own type) on every instruction set
//! this machine has:
//! 1. the scalar kernel equals the reference `dot_row` on the dequantized activations up to
//!    float rounding, and `dot_row` on the unquantized activations up to the quantization
//!    error;
//! 2. every SIMD kernel quantizes activations to the same bytes as the scalar one, and its
//!    dot products equal the scalar ones up to float rounding;
//! 3. `dot_many` equals `dot` row by row, bit for bit (same operations in the same order).
//!
//! The rounding bounds derive from the sum of |terms|: integer block sums are exact, so the
//! kernels differ only in how they round and add one f32 term per block.

use plumb_ggml::{dequantize_row_to_vec, dot_row, quantize_row_to_vec, DotKernel, GgmlType, Isa};
use proptest::prelude::*;

const TYPES: [GgmlType; 9] = [
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::IQ4_NL,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::F32,
];

const EPS: f64 = f32::EPSILON as f64 / 2.0;

/// The instruction sets this family must have a kernel for, for every type, on this target.
fn expected_isas() -> Vec<Isa> {
    let mut isas = vec![Isa::Scalar];
    if cfg!(target_arch = "x86_64") {
        isas.extend([Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512, Isa::Avx512Vnni]);
    }
    if cfg!(target_arch = "aarch64") {
        isas.extend([Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm]);
    }
    if cfg!(target_arch = "wasm32") {
        isas.push(Isa::Simd128);
    }
    isas
}

/// The SIMD instruction sets to compare with the scalar kernel; those this CPU lacks are
/// skipped, loudly but once per test binary.
fn simd_isas() -> &'static [Isa] {
    static ISAS: std::sync::OnceLock<Vec<Isa>> = std::sync::OnceLock::new();
    ISAS.get_or_init(|| {
        let available = Isa::available();
        expected_isas()
            .into_iter()
            .filter(|&isa| isa != Isa::Scalar)
            .filter(|isa| {
                plumb_testutil::cpu_has("vec_dot_blocks32", isa.name(), available.contains(isa))
            })
            .collect()
    })
}

/// A small xorshift generator: the bulk of each case comes from one proptest-chosen seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    fn sign(&mut self) -> f32 {
        if self.next_u64() & 1 == 0 {
            1.0
        } else {
            -1.0
        }
    }

    /// Roughly N(0, 1): a sum of uniforms.
    fn normal(&mut self) -> f32 {
        let s: f64 = (0..4)
            .map(|_| (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
            .sum();
        ((s - 2.0) * 3f64.sqrt()) as f32
    }

    /// A finite f16 scale: zero, subnormal, the largest, near one, or any finite value.
    fn f16_scale(&mut self) -> [u8; 2] {
        let magnitude = match self.below(6) {
            0 => 0,
            1 => 1 + self.below(0x3FF) as u16,
            2 => 0x7BFF,
            3 => 0x3C00 + self.below(0x400) as u16 - 0x200,
            _ => self.below(0x7C00) as u16,
        };
        let sign = (self.next_u64() as u16) & 0x8000;
        (sign | magnitude).to_le_bytes()
    }
}

/// How a weight row's quants are filled.
#[derive(Debug, Clone, Copy)]
enum Quants {
    Random,
    AllMax,
    AllMin,
    /// Each block picks one of the above.
    Mixed,
}

/// A weight row of `n` elements of `ty` (whole blocks).
fn weight_row(ty: GgmlType, n: usize, quants: Quants, rng: &mut Rng) -> Vec<u8> {
    let n_blocks = n / ty.block_size();
    match ty {
        GgmlType::F16 => {
            // Any finite half, subnormals and ±65504 included.
            let mut row = Vec::with_capacity(2 * n);
            for _ in 0..n {
                let bits = (rng.next_u64() as u16 & 0x8000) | rng.below(0x7C00) as u16;
                row.extend_from_slice(&bits.to_le_bytes());
            }
            row
        }
        GgmlType::BF16 | GgmlType::F32 => {
            // Wide but bounded magnitudes, so that no product overflows f32.
            let x: Vec<f32> = (0..n)
                .map(|_| match rng.below(8) {
                    0 => 0.0,
                    1 => rng.sign() * 1e-39,
                    _ => rng.normal() * 2f32.powi(rng.below(41) as i32 - 20),
                })
                .collect();
            quantize_row_to_vec(ty, &x).expect("float types quantize")
        }
        _ => {
            let block_bytes = ty.block_bytes();
            let mut row = Vec::with_capacity(n_blocks * block_bytes);
            let has_min = matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1);
            let header = if has_min { 4 } else { 2 };
            let (max, min) = if ty == GgmlType::Q8_0 {
                (0x7F, 0x80)
            } else {
                (0xFF, 0x00)
            };
            for _ in 0..n_blocks {
                let mut block = vec![0u8; block_bytes];
                block[..2].copy_from_slice(&rng.f16_scale());
                if has_min {
                    block[2..4].copy_from_slice(&rng.f16_scale());
                }
                let fill = match quants {
                    Quants::Mixed => {
                        [Quants::Random, Quants::AllMax, Quants::AllMin][rng.below(3) as usize]
                    }
                    q => q,
                };
                for b in &mut block[header..] {
                    *b = match fill {
                        Quants::AllMax => max,
                        Quants::AllMin => min,
                        _ => rng.next_u64() as u8,
                    };
                }
                row.extend_from_slice(&block);
            }
            row
        }
    }
}

/// How an activation row is filled.
#[derive(Debug, Clone, Copy)]
enum Acts {
    Normal,
    /// Each block scaled by 2^e, e in −40..40.
    WideRange,
    /// Whole blocks of zeros among normal ones.
    ZeroBlocks,
    AllZero,
    /// One huge value among small ones.
    Outlier,
    /// ±large values only.
    Large,
    /// Blocks so small that the Q8 scale rounds to zero, or 127/amax overflows.
    Tiny,
}

const ACTS: [Acts; 7] = [
    Acts::Normal,
    Acts::WideRange,
    Acts::ZeroBlocks,
    Acts::AllZero,
    Acts::Outlier,
    Acts::Large,
    Acts::Tiny,
];

/// The largest activation magnitude: F16 activations must stay finite, Q8 scales (amax/127)
/// must fit in an f16, and so must Q8_1's s = d·Σq (ggml's format overflows beyond).
fn act_limit(ty: GgmlType) -> f32 {
    match ty {
        GgmlType::F16 => 6.0e4,
        GgmlType::Q4_1 | GgmlType::Q5_1 => 2.0e3,
        _ => 4.0e6,
    }
}

/// `n` activations, filled 32 at a time.
fn act_row(ty: GgmlType, n: usize, style: Acts, rng: &mut Rng) -> Vec<f32> {
    let limit = act_limit(ty);
    let mut x = Vec::with_capacity(n.next_multiple_of(32));
    for _ in 0..n.div_ceil(32) {
        let scale = match style {
            Acts::WideRange => 2f32.powi(rng.below(80) as i32 - 40),
            Acts::ZeroBlocks if rng.below(2) == 0 => 0.0,
            Acts::AllZero => 0.0,
            Acts::Tiny => [1e-7, 1e-38, 1e-44][rng.below(3) as usize],
            _ => 1.0,
        };
        for _ in 0..32 {
            let v = match style {
                Acts::Large => {
                    rng.sign() * limit * (0.25 + 0.75 * (rng.below(1000) as f32 / 1000.0))
                }
                _ => rng.normal() * scale,
            };
            x.push(v.clamp(-limit, limit));
        }
    }
    x.truncate(n);
    if matches!(style, Acts::Outlier) {
        let i = rng.below(x.len() as u64) as usize;
        x[i] = rng.sign() * limit;
    }
    x
}

/// One property-test case: a weight row and `acts.len()` activation rows.
#[derive(Debug)]
struct Case {
    ty: GgmlType,
    /// Elements per row: whole 32-element blocks, or for the float types any length.
    n: usize,
    w: Vec<u8>,
    acts: Vec<Vec<f32>>,
}

fn case(ty: GgmlType) -> impl Strategy<Value = Case> {
    let n_blocks = proptest::sample::select(vec![1usize, 2, 3, 4, 5, 7, 9, 28]);
    let quants = proptest::sample::select(vec![
        Quants::Random,
        Quants::AllMax,
        Quants::AllMin,
        Quants::Mixed,
    ]);
    let styles = proptest::collection::vec(proptest::sample::select(ACTS.to_vec()), 1..=9);
    let cut = 0..32usize;
    (n_blocks, cut, quants, styles, any::<u64>()).prop_map(
        move |(n_blocks, cut, quants, styles, seed)| {
            let mut rng = Rng::new(seed);
            let n = if ty.block_size() == 1 {
                n_blocks * 32 - cut
            } else {
                n_blocks * 32
            };
            Case {
                ty,
                n,
                w: weight_row(ty, n, quants, &mut rng),
                acts: styles
                    .into_iter()
                    .map(|s| act_row(ty, n, s, &mut rng))
                    .collect(),
            }
        },
    )
}

/// Where the offset `m` lies in a block, for the types that have one.
fn block_min_offset(ty: GgmlType) -> Option<usize> {
    matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1).then_some(2)
}

/// The offset `m` of the block holding element i (zero for types without one).
fn block_min(ty: GgmlType, w: &[u8], i: usize) -> f64 {
    match block_min_offset(ty) {
        Some(offset) => f16_at(w, i / 32 * ty.block_bytes() + offset),
        None => 0.0,
    }
}

/// Per element, a bound on |x − dequantized activation|.
fn act_error_bounds(act_type: GgmlType, x: &[f32], act: &[u8]) -> Vec<f64> {
    match act_type {
        GgmlType::F32 => vec![0.0; x.len()],
        GgmlType::F16 => x
            .iter()
            .map(|&v| f64::from(v).abs() * 2f64.powi(-11) + 2f64.powi(-25))
            .collect(),
        GgmlType::BF16 => x
            .iter()
            .map(|&v| f64::from(v).abs() * 2f64.powi(-8) + 2f64.powi(-134))
            .collect(),
        GgmlType::Q8_0 | GgmlType::Q8_1 => {
            let bytes = act_type.block_bytes();
            x.chunks(32)
                .zip(act.chunks(bytes))
                .flat_map(|(xb, ab)| {
                    let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let d16 = f16_at(ab, 0);
                    let d = f64::from(amax) / 127.0;
                    let bound = if (127.0 / amax).is_finite() {
                        (0.5 + 1e-4) * d + 127.0 * (d16 - d).abs()
                    } else {
                        f64::from(amax)
                    };
                    std::iter::repeat_n(bound, 32)
                })
                .collect()
        }
        other => panic!("not an activation type of this family: {other}"),
    }
}

fn f16_at(bytes: &[u8], offset: usize) -> f64 {
    let v = dequantize_row_to_vec(GgmlType::F16, &bytes[offset..offset + 2]).expect("f16");
    f64::from(v[0])
}

/// An upper bound on every term a kernel rounds while computing this dot product: each
/// element's Σ(|w_i| + 2|m|)·|a_i| (the scale part d·q = w − m and the offset part), plus
/// |m·s| per block for the Q8_1 partner types.
fn magnitude(ty: GgmlType, w: &[f32], w_bytes: &[u8], a: &[f32], act: &[u8]) -> f64 {
    let mut sum = 0.0;
    for (i, (&wi, &ai)) in w.iter().zip(a).enumerate() {
        let m = block_min(ty, w_bytes, i).abs();
        sum += (f64::from(wi).abs() + 2.0 * m) * f64::from(ai).abs();
    }
    if block_min_offset(ty).is_some() {
        for (b, block) in act.chunks(GgmlType::Q8_1.block_bytes()).enumerate() {
            sum += block_min(ty, w_bytes, b * 32).abs() * f16_at(block, 2).abs();
        }
    }
    sum
}

/// How far the offset terms m·s of the Q8_1 partner types lie from m·Σa_i: s is d·Σq
/// rounded to f16 with the unrounded d, while the dequantized activations use the f16 d.
fn offset_mismatch(ty: GgmlType, w_bytes: &[u8], act: &[u8]) -> f64 {
    if block_min_offset(ty).is_none() {
        return 0.0;
    }
    act.chunks(GgmlType::Q8_1.block_bytes())
        .enumerate()
        .map(|(b, block)| {
            let sum_q: f64 = block[4..].iter().map(|&q| f64::from(q as i8)).sum();
            let mismatch = f16_at(block, 2) - f16_at(block, 0) * sum_q;
            block_min(ty, w_bytes, b * 32).abs() * mismatch.abs()
        })
        .sum()
}

fn kernel(ty: GgmlType, isa: Isa) -> DotKernel {
    DotKernel::for_isa(ty, isa).unwrap_or_else(|| panic!("no {} kernel for {ty}", isa.name()))
}

/// Quantizes every activation row of the case with `k` and computes each row's dot product,
/// through `dot` and through `dot_many`, checking that they agree bit for bit.
fn run(k: &DotKernel, case: &Case) -> (Vec<u8>, Vec<f32>) {
    let n = case.n;
    let row_bytes = k.act_row_bytes(n);
    let mut acts = vec![0u8; row_bytes * case.acts.len()];
    for (x, out) in case.acts.iter().zip(acts.chunks_exact_mut(row_bytes)) {
        k.quantize(x, out).expect("quantize");
    }
    let dots: Vec<f32> = acts
        .chunks_exact(row_bytes)
        .map(|act| k.dot(n, &case.w, act).expect("dot"))
        .collect();
    let mut many = vec![f32::NAN; case.acts.len()];
    k.dot_many_unchecked(&case.w, &acts, &mut many);
    for (r, (a, b)) in dots.iter().zip(&many).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{k:?}: dot_many row {r} of {} is {b}, dot is {a}",
            many.len()
        );
    }
    (acts, dots)
}

fn check_scalar(case: &Case) {
    let ty = case.ty;
    let k = kernel(ty, Isa::Scalar);
    let act_type = k.act_type();
    let (acts, dots) = run(&k, case);
    let w = dequantize_row_to_vec(ty, &case.w).expect("weights dequantize");
    let row_bytes = acts.len() / case.acts.len();
    for (r, ((x, act), &got)) in case
        .acts
        .iter()
        .zip(acts.chunks_exact(row_bytes))
        .zip(&dots)
        .enumerate()
    {
        let a = dequantize_row_to_vec(act_type, act).expect("activations dequantize");
        let terms = case.n.div_ceil(32) as f64 + 4.0;
        let tolerance = terms * EPS * magnitude(ty, &w, &case.w, &a, act)
            + offset_mismatch(ty, &case.w, act)
            + 1e-30 * w.len() as f64;
        let want = dot_row(ty, &case.w, &a).expect("dot_row");
        let err = (f64::from(got) - f64::from(want)).abs();
        assert!(
            err <= tolerance,
            "{ty} scalar row {r}: {got} vs dot_row on the quantized activations {want} (error {err:e} > {tolerance:e})"
        );

        let exact = dot_row(ty, &case.w, x).expect("dot_row");
        let quantization: f64 = w
            .iter()
            .zip(act_error_bounds(act_type, x, act))
            .map(|(&wi, e)| f64::from(wi).abs() * e)
            .sum();
        let tolerance = tolerance
            + quantization * (1.0 + 1e-6)
            + 2.0 * EPS * magnitude(ty, &w, &case.w, x, act);
        let err = (f64::from(got) - f64::from(exact)).abs();
        assert!(
            err <= tolerance,
            "{ty} scalar row {r}: {got} vs dot_row on the f32 activations {exact} (error {err:e} > {tolerance:e})"
        );
    }
}

fn check_simd(case: &Case, isa: Isa) {
    let ty = case.ty;
    let scalar = kernel(ty, Isa::Scalar);
    let simd = kernel(ty, isa);
    assert_eq!(simd.act_type(), scalar.act_type());
    let (scalar_acts, scalar_dots) = run(&scalar, case);
    let (simd_acts, simd_dots) = run(&simd, case);
    let row_bytes = scalar_acts.len() / case.acts.len();
    let w = dequantize_row_to_vec(ty, &case.w).expect("weights dequantize");
    // Float types sum in f32 lanes: a rounding per element at worst.
    let terms = if ty.block_size() == 1 {
        case.n as f64
    } else {
        (case.n / 32) as f64
    } + 4.0;
    for (r, (s_act, v_act)) in scalar_acts
        .chunks_exact(row_bytes)
        .zip(simd_acts.chunks_exact(row_bytes))
        .enumerate()
    {
        assert!(
            s_act == v_act,
            "{ty} {}: row {r} quantizes differently from scalar",
            isa.name()
        );
        let a = dequantize_row_to_vec(scalar.act_type(), s_act).expect("activations dequantize");
        let tolerance =
            2.0 * terms * EPS * magnitude(ty, &w, &case.w, &a, s_act) + 1e-30 * w.len() as f64;
        let (want, got) = (scalar_dots[r], simd_dots[r]);
        let err = (f64::from(got) - f64::from(want)).abs();
        assert!(
            err <= tolerance,
            "{ty} {} row {r}: {got} vs scalar {want} (error {err:e} > {tolerance:e})",
            isa.name()
        );
    }
}

fn check(case: Case) {
    check_scalar(&case);
    for &isa in simd_isas() {
        check_simd(&case, isa);
    }
}

macro_rules! type_tests {
    ($($name:ident: $ty:expr),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig {
                cases: 256,
                failure_persistence: None,
                ..ProptestConfig::default()
            })]
            $(
                #[test]
                fn $name(case in case($ty)) {
                    check(case);
                }
            )*
        }
    };
}

type_tests! {
    q4_0: GgmlType::Q4_0,
    q4_1: GgmlType::Q4_1,
    q5_0: GgmlType::Q5_0,
    q5_1: GgmlType::Q5_1,
    q8_0: GgmlType::Q8_0,
    iq4_nl: GgmlType::IQ4_NL,
    f16: GgmlType::F16,
    bf16: GgmlType::BF16,
    f32: GgmlType::F32,
}

/// One GEMM case: up to a panel of weight rows (and a row more, which must be left out)
/// against a number of activation rows that exercises every group size of the kernel.
#[derive(Debug)]
struct GemmCase {
    ty: GgmlType,
    n: usize,
    rows: Vec<Vec<u8>>,
    acts: Vec<Vec<f32>>,
}

fn gemm_case(ty: GgmlType) -> impl Strategy<Value = GemmCase> {
    let n_blocks = proptest::sample::select(vec![1usize, 2, 3, 5, 28]);
    let quants = proptest::sample::select(vec![Quants::Random, Quants::Mixed]);
    let styles = proptest::collection::vec(proptest::sample::select(ACTS.to_vec()), 1..=19);
    (n_blocks, 1..=17usize, quants, styles, any::<u64>()).prop_map(
        move |(n_blocks, n_rows, quants, styles, seed)| {
            let mut rng = Rng::new(seed);
            let n = n_blocks * 32;
            GemmCase {
                ty,
                n,
                rows: (0..n_rows)
                    .map(|_| weight_row(ty, n, quants, &mut rng))
                    .collect(),
                acts: styles
                    .into_iter()
                    .map(|s| act_row(ty, n, s, &mut rng))
                    .collect(),
            }
        },
    )
}

/// Every GEMM output, of panels packed for one product or kept, equals the same instruction
/// set's `dot` up to the order of its per-block terms; rows missing from the panel give zeros.
fn check_gemm(case: GemmCase) {
    let ty = case.ty;
    for isa in Isa::available() {
        let k = kernel(ty, isa);
        for gemm in [k.gemm(), k.kept_gemm()].into_iter().flatten() {
            let rows_in_panel = case.rows.len().min(gemm.panel_rows());
            let weights: Vec<u8> = case.rows[..rows_in_panel].concat();
            // A row beyond the panel follows the panel's rows: packing must not read it.
            let with_extra: Vec<u8> = case.rows.concat();
            let mut panel = vec![0xAAu8; gemm.panel_bytes(case.n)];
            gemm.pack_panel_unchecked(&with_extra[..weights.len()], case.n, &mut panel);
            let row_bytes = k.act_row_bytes(case.n);
            let packed_bytes = gemm.act_bytes(case.n);
            let mut quantized = vec![vec![0u8; row_bytes]; case.acts.len()];
            let mut packed = vec![0u8; packed_bytes * case.acts.len()];
            for ((x, q), p) in case
                .acts
                .iter()
                .zip(&mut quantized)
                .zip(packed.chunks_exact_mut(packed_bytes))
            {
                k.quantize(x, q).expect("quantize");
                gemm.pack_act_unchecked(q, p);
            }
            let mut out = vec![f32::NAN; case.acts.len() * gemm.panel_rows()];
            gemm.run_unchecked(&panel, &packed, &mut out);
            for (t, q) in quantized.iter().enumerate() {
                let a = dequantize_row_to_vec(k.act_type(), q).expect("activations dequantize");
                for r in 0..gemm.panel_rows() {
                    let got = out[t * gemm.panel_rows() + r];
                    let Some(w) = case.rows[..rows_in_panel].get(r) else {
                        assert_eq!(
                            got.to_bits(),
                            0,
                            "{k:?}: empty panel row {r}, activation {t}"
                        );
                        continue;
                    };
                    let want = k.dot(case.n, w, q).expect("dot");
                    let wf = dequantize_row_to_vec(ty, w).expect("weights dequantize");
                    let terms = (case.n / 32) as f64 + 4.0;
                    let tolerance =
                        2.0 * terms * EPS * magnitude(ty, &wf, w, &a, q) + 1e-30 * case.n as f64;
                    let err = (f64::from(got) - f64::from(want)).abs();
                    assert!(
                    err <= tolerance,
                    "{k:?} GEMM row {r} of {rows_in_panel}, activation {t} of {}: {got} vs dot {want} (error {err:e} > {tolerance:e})",
                    case.acts.len()
                );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn gemm_q4_0(case in gemm_case(GgmlType::Q4_0)) {
        check_gemm(case);
    }
    #[test]
    fn gemm_q5_0(case in gemm_case(GgmlType::Q5_0)) {
        check_gemm(case);
    }
    #[test]
    fn gemm_q8_0(case in gemm_case(GgmlType::Q8_0)) {
        check_gemm(case);
    }
    #[test]
    fn gemm_iq4_nl(case in gemm_case(GgmlType::IQ4_NL)) {
        check_gemm(case);
    }
    #[test]
    fn gemm_q4_1(case in gemm_case(GgmlType::Q4_1)) {
        check_gemm(case);
    }
    #[test]
    fn gemm_q5_1(case in gemm_case(GgmlType::Q5_1)) {
        check_gemm(case);
    }
}

/// The signed types have a GEMM where the CPU has AVX-512 VNNI; without it the tests above
/// check nothing, so say so.
#[cfg(target_arch = "x86_64")]
#[test]
fn signed_types_have_a_gemm_with_vnni() {
    let vnni = Isa::available().contains(&Isa::Avx512Vnni);
    if !plumb_testutil::cpu_has(
        "signed_types_have_a_gemm_with_vnni",
        Isa::Avx512Vnni.name(),
        vnni,
    ) {
        return;
    }
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
    ] {
        assert!(kernel(ty, Isa::Avx512Vnni).gemm().is_some(), "{ty}");
    }
}

/// The signed and offset types have a GEMM where the CPU has AVX2; without it the tests
/// above check only the AVX-512 VNNI GEMMs, so say so.
#[cfg(target_arch = "x86_64")]
#[test]
fn signed_and_offset_types_have_a_gemm_with_avx2() {
    let avx2 = Isa::available().contains(&Isa::Avx2);
    if !plumb_testutil::cpu_has(
        "signed_and_offset_types_have_a_gemm_with_avx2",
        Isa::Avx2.name(),
        avx2,
    ) {
        return;
    }
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::IQ4_NL,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
    ] {
        let k = kernel(ty, Isa::Avx2);
        assert!(k.gemm().is_some() && k.kept_gemm().is_some(), "{ty}");
    }
}

/// Every integer type has a GEMM where the CPU has NEON's dot-product extension (`sdot`) and
/// i8mm (`smmla`); without them the tests above check no NEON GEMM, so say so.
#[cfg(target_arch = "aarch64")]
#[test]
fn integer_types_have_a_gemm_with_dotprod_and_i8mm() {
    let available = Isa::available();
    for isa in [Isa::NeonDotprod, Isa::NeonI8mm] {
        if !plumb_testutil::cpu_has(
            "integer_types_have_a_gemm_with_dotprod_and_i8mm",
            isa.name(),
            available.contains(&isa),
        ) {
            continue;
        }
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::IQ4_NL,
            GgmlType::Q4_1,
            GgmlType::Q5_1,
        ] {
            let k = kernel(ty, isa);
            assert!(k.gemm().is_some() && k.kept_gemm().is_some(), "{k:?}");
        }
    }
}

#[test]
fn every_isa_has_every_type() {
    let available = Isa::available();
    for isa in expected_isas() {
        if !plumb_testutil::cpu_has(
            "every_isa_has_every_type",
            isa.name(),
            available.contains(&isa),
        ) {
            continue;
        }
        for ty in TYPES {
            let k = kernel(ty, isa);
            let want = match ty {
                GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
                GgmlType::F16 | GgmlType::BF16 | GgmlType::F32 => ty,
                _ => GgmlType::Q8_0,
            };
            assert_eq!(k.act_type(), want, "{k:?}");
            assert_eq!(k.isa(), isa);
        }
    }
}

/// The Q8 quantizers round x·127/amax half to even (ggml's x86 quantizer), and a block whose
/// multiplier overflows quantizes to zeros; every instruction set gives the same bytes.
#[test]
fn q8_rounding_is_half_to_even() {
    let mut x = vec![0f32; 64];
    // amax = 127 makes the multiplier exactly 1.
    x[..8].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]);
    // A block far below the smallest f16 scale: 127/amax overflows.
    x[32] = 1e-38;
    x[33] = -3e-39;
    for ty in [GgmlType::Q4_0, GgmlType::Q4_1] {
        for isa in Isa::available() {
            let Some(k) = DotKernel::for_isa(ty, isa) else {
                continue;
            };
            let mut act = vec![0u8; k.act_row_bytes(64)];
            k.quantize(&x, &mut act).expect("quantize");
            let bytes = k.act_type().block_bytes();
            let qs = bytes - 32;
            let q: Vec<i8> = act[qs..qs + 8].iter().map(|&b| b as i8).collect();
            assert_eq!(q, [127, 0, 2, 2, 0, -2, -2, 126], "{k:?}");
            assert_eq!(&act[..2], &[0x00, 0x3C], "{k:?}: d = 1");
            assert!(
                act[bytes..].iter().all(|&b| b == 0),
                "{k:?}: tiny block {:?}",
                &act[bytes..]
            );
            if k.act_type() == GgmlType::Q8_1 {
                // s = d·Σq = 127 + 0 + 2 + 2 + 0 − 2 − 2 + 126 = 253.
                assert_eq!(&act[2..4], &0x5BE8u16.to_le_bytes(), "{k:?}: s");
            }
        }
    }
}

/// Single-threaded timings, k = 896 (Qwen2.5-0.5B's width): `dot` over 896 weight rows, and
/// `dot_many` of the same rows against 16 activation rows, and where there is one the GEMM,
/// in ns per weight row per activation row. Run with
/// `cargo test --release -p plumb-ggml --test vec_dot_blocks32 -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark"]
fn bench_k896() {
    use std::hint::black_box;
    use std::time::Instant;
    const K: usize = 896;
    const N_ROWS: usize = 896;
    const N_ACTS: usize = 16;
    let mut rng = Rng::new(42);
    for ty in TYPES {
        let w = weight_row(ty, N_ROWS * K, Quants::Random, &mut rng);
        let row_bytes = w.len() / N_ROWS;
        let x: Vec<f32> = (0..K * N_ACTS).map(|_| rng.normal()).collect();
        for isa in Isa::available() {
            let Some(k) = DotKernel::for_isa(ty, isa) else {
                continue;
            };
            let act_bytes = k.act_row_bytes(K);
            let mut acts = vec![0u8; act_bytes * N_ACTS];
            for (x, a) in x.chunks_exact(K).zip(acts.chunks_exact_mut(act_bytes)) {
                k.quantize_unchecked(x, a);
            }
            let best = |f: &mut dyn FnMut()| {
                (0..5)
                    .map(|_| {
                        let t = Instant::now();
                        f();
                        t.elapsed().as_nanos() as f64
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let dot = best(&mut || {
                for row in w.chunks_exact(row_bytes) {
                    black_box(k.dot_unchecked(row, &acts[..act_bytes]));
                }
            }) / N_ROWS as f64;
            let mut out = [0f32; N_ACTS];
            let many = best(&mut || {
                for row in w.chunks_exact(row_bytes) {
                    k.dot_many_unchecked(row, &acts, &mut out);
                    black_box(&out);
                }
            }) / (N_ROWS * N_ACTS) as f64;
            let quantize = best(&mut || {
                for (x, a) in x.chunks_exact(K).zip(acts.chunks_exact_mut(act_bytes)) {
                    k.quantize_unchecked(x, a);
                }
                black_box(&acts);
            }) / N_ACTS as f64;
            eprintln!(
                "{ty:>6} {:<12} dot {dot:8.1} ns/row   dot_many {many:8.1} ns/row/act   quantize {quantize:8.1} ns/row",
                isa.name()
            );
            let Some(gemm) = k.gemm() else {
                continue;
            };
            let rows = gemm.panel_rows();
            let panel_bytes = gemm.panel_bytes(K);
            let mut panels = vec![0u8; N_ROWS / rows * panel_bytes];
            let pack = best(&mut || {
                for (w, p) in w
                    .chunks_exact(rows * row_bytes)
                    .zip(panels.chunks_exact_mut(panel_bytes))
                {
                    gemm.pack_panel_unchecked(w, K, p);
                }
                black_box(&panels);
            }) / N_ROWS as f64;
            let packed_bytes = gemm.act_bytes(K);
            let mut packed = vec![0u8; N_ACTS * packed_bytes];
            for (a, p) in acts
                .chunks_exact(act_bytes)
                .zip(packed.chunks_exact_mut(packed_bytes))
            {
                gemm.pack_act_unchecked(a, p);
            }
            let mut out = vec![0f32; N_ACTS * rows];
            let run = best(&mut || {
                for p in panels.chunks_exact(panel_bytes) {
                    gemm.run_unchecked(p, &packed, &mut out);
                    black_box(&out);
                }
            }) / (N_ROWS * N_ACTS) as f64;
            eprintln!(
                "{ty:>6} {:<12} gemm {run:8.1} ns/row/act   packing weights {pack:8.1} ns/row",
                isa.name()
            );
        }
    }
}

/// Real weights: the first rows of every matrix of smollm2-135m (Q4_1, Q8_0) against normal
/// activations and activations with an outlier, through every check above.
#[test]
fn smollm2_weights() {
    let path = plumb_testutil::require_model!("smollm2-135m");
    let file = plumb_gguf::GgufFile::open(&path).expect("model opens");
    let mut rng = Rng::new(7);
    let mut matrices = 0;
    for info in file.tensors() {
        if !TYPES.contains(&info.ggml_type) || info.shape.len() != 2 {
            continue;
        }
        matrices += 1;
        let n = info.shape[0] as usize;
        let row_bytes = info.row_bytes() as usize;
        for w in file.tensor_data(info).chunks_exact(row_bytes).take(2) {
            let acts = [Acts::Normal, Acts::Outlier, Acts::WideRange]
                .map(|style| act_row(info.ggml_type, n, style, &mut rng))
                .to_vec();
            check(Case {
                ty: info.ggml_type,
                n,
                w: w.to_vec(),
                acts,
            });
        }
    }
    assert!(matrices > 100, "only {matrices} matrices of this family");
}
