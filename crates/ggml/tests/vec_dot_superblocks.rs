//! The super-block kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS against Q8_K activations) on
//! every instruction set this machine has:
//! - the scalar kernel against the reference `dot_row` on the dequantized activations, to
//!   within f32 rounding, and against `dot_row` on the f32 activations, to within the
//!   activation quantization error;
//! - every SIMD kernel against the scalar one (same activation bytes, dots equal to within
//!   f32 rounding: integer block sums are exact, only the f32 order differs; SIMD128's are
//!   equal bit for bit);
//! - `dot_many` against `dot`, bit for bit, on every instruction set.
//!
//! Weights are random bytes with chosen f16 scales (zero, subnormal, ordinary, the largest
//! finite, negative) and sometimes all-minimum or all-maximum quants and scales; activations
//! mix ordinary, zero, tiny, large, single-outlier and constant blocks.

use plumb_ggml::{dequantize_row_to_vec, dot_row, DotKernel, GgmlType, Isa};
use proptest::prelude::*;

const TYPES: [GgmlType; 6] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

/// Where a type keeps its f16 super-block scale `d` and, for the types with mins, `dmin`,
/// and the byte range of its quants (everything that is neither a scale nor a min).
struct Layout {
    d: usize,
    dmin: Option<usize>,
    quants: std::ops::Range<usize>,
}

fn layout(ty: GgmlType) -> Layout {
    match ty {
        GgmlType::Q2_K => Layout {
            d: 80,
            dmin: Some(82),
            quants: 16..80,
        },
        GgmlType::Q3_K => Layout {
            d: 108,
            dmin: None,
            quants: 0..96,
        },
        GgmlType::Q4_K => Layout {
            d: 0,
            dmin: Some(2),
            quants: 16..144,
        },
        GgmlType::Q5_K => Layout {
            d: 0,
            dmin: Some(2),
            quants: 16..176,
        },
        GgmlType::Q6_K => Layout {
            d: 208,
            dmin: None,
            quants: 0..192,
        },
        GgmlType::IQ4_XS => Layout {
            d: 0,
            dmin: None,
            quants: 8..136,
        },
        other => panic!("{other} is not a super-block type"),
    }
}

/// A small xorshift generator: the bulk of each case comes from one proptest-chosen seed.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Roughly N(0, 1).
    fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.uniform()).sum::<f32>() * 1.732 - 3.464
    }
}

#[derive(Debug, Clone, Copy)]
enum Scale {
    Zero,
    Subnormal,
    Ordinary,
    Largest,
    Negative,
}

#[derive(Debug, Clone, Copy)]
enum Quants {
    Random,
    AllMin,
    AllMax,
    /// Random quants, every other byte (sub-block scales included) 0xFF.
    MaxScales,
}

#[derive(Debug, Clone, Copy)]
enum Activation {
    Ordinary,
    Zeros,
    Tiny,
    Large,
    Outlier,
    /// Every value the same, so every quant is −127: with the largest levels, the largest
    /// integer sums a kernel must hold.
    Constant,
}

fn f16_bits(scale: Scale, rng: &mut Rng) -> u16 {
    let r = rng.next_u64() as u16;
    match scale {
        Scale::Zero => 0,
        Scale::Subnormal => 1 + r % 0x3ff,
        // Exponents around 2^-10 .. 2^2, as real scales are.
        Scale::Ordinary => 0x1400 + r % 0x3000,
        Scale::Largest => 0x7bff,
        Scale::Negative => 0x8000 | (0x1400 + r % 0x3000),
    }
}

fn weight_row(ty: GgmlType, blocks: &[(Scale, Scale, Quants)], rng: &mut Rng) -> Vec<u8> {
    let l = layout(ty);
    let mut row = Vec::with_capacity(blocks.len() * ty.block_bytes());
    for &(d, dmin, quants) in blocks {
        let mut b: Vec<u8> = (0..ty.block_bytes())
            .map(|_| rng.next_u64() as u8)
            .collect();
        match quants {
            Quants::Random => {}
            Quants::AllMin => b[l.quants.clone()].fill(0),
            Quants::AllMax => b[l.quants.clone()].fill(0xff),
            Quants::MaxScales => {
                for (i, byte) in b.iter_mut().enumerate() {
                    if !l.quants.contains(&i) {
                        *byte = 0xff;
                    }
                }
            }
        }
        b[l.d..l.d + 2].copy_from_slice(&f16_bits(d, rng).to_le_bytes());
        if let Some(at) = l.dmin {
            b[at..at + 2].copy_from_slice(&f16_bits(dmin, rng).to_le_bytes());
        }
        row.extend(b);
    }
    row
}

fn activation_row(kinds: &[Activation], rng: &mut Rng) -> Vec<f32> {
    let mut x = Vec::with_capacity(kinds.len() * 256);
    for &kind in kinds {
        let block: Vec<f32> = match kind {
            Activation::Ordinary => (0..256).map(|_| rng.normal()).collect(),
            Activation::Zeros => vec![0.0; 256],
            Activation::Tiny => (0..256).map(|_| 1e-20 * rng.normal()).collect(),
            Activation::Large => (0..256)
                .map(|i| if i % 3 == 0 { -4e4 } else { 3e4 } * (0.5 + rng.uniform()))
                .collect(),
            Activation::Constant => vec![0.75; 256],
            Activation::Outlier => {
                let mut b: Vec<f32> = (0..256).map(|_| rng.normal()).collect();
                b[(rng.next_u64() % 256) as usize] = -5e3;
                b
            }
        };
        x.extend(block);
    }
    x
}

/// The size of the terms a kernel adds up for `w · a`, in f64: Σ|a_i|·(|w_i − base_i| +
/// |base_i|), where `base` is the row dequantized with every quant zero (for Q2_K, Q4_K and
/// Q5_K the −dmin·m part, for Q3_K and Q6_K the level offset −4·d·s and −32·d·s). The kernels
/// sum the level part and the base part separately (the SIMD ones in per-lane f32 partial
/// sums), so their rounding scales with both parts, not with `|w · a|`, which may cancel to
/// nearly nothing.
fn magnitude(ty: GgmlType, w: &[u8], a: &[f32]) -> f64 {
    let (full, base) = weight_parts(ty, w);
    magnitude_of_parts(&full, &base, a)
}

/// The row dequantized, and dequantized with every quant zero (see [`magnitude`]).
fn weight_parts(ty: GgmlType, w: &[u8]) -> (Vec<f32>, Vec<f32>) {
    let full = dequantize_row_to_vec(ty, w).expect("dequantizes");
    let quants = layout(ty).quants;
    let mut zeroed = w.to_vec();
    for block in zeroed.chunks_exact_mut(ty.block_bytes()) {
        block[quants.clone()].fill(0);
    }
    let base = dequantize_row_to_vec(ty, &zeroed).expect("dequantizes");
    (full, base)
}

fn magnitude_of_parts(full: &[f32], base: &[f32], a: &[f32]) -> f64 {
    full.iter()
        .zip(base)
        .zip(a)
        .map(|((&w, &b), &a)| {
            let (w, b, a) = (f64::from(w), f64::from(b), f64::from(a));
            ((w - b).abs() + b.abs()) * a.abs()
        })
        .sum()
}

/// The f32 rounding allowance for a dot product of this magnitude: a few ulps per
/// super-block (scale products, integer-to-float conversion, accumulation), far above what
/// the kernels need and far below any layout or scale mistake.
fn rounding_bound(magnitude: f64) -> f64 {
    1e-5 * magnitude + 1e-35
}

fn check_close(what: &str, got: f32, expected: f64, bound: f64) -> Result<(), TestCaseError> {
    prop_assert!(
        got.is_finite() && (f64::from(got) - expected).abs() <= bound,
        "{}: got {}, expected {} ± {}",
        what,
        got,
        expected,
        bound
    );
    Ok(())
}

fn scalar(ty: GgmlType) -> DotKernel {
    DotKernel::for_isa(ty, Isa::Scalar).expect("every super-block type has a scalar kernel")
}

fn quantize(kernel: &DotKernel, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; kernel.act_row_bytes(x.len())];
    kernel.quantize(x, &mut q).expect("whole blocks");
    q
}

/// The kernels of `ty` for every instruction set this machine has, scalar first.
fn kernels(ty: GgmlType) -> Vec<DotKernel> {
    Isa::available()
        .into_iter()
        .filter_map(|isa| DotKernel::for_isa(ty, isa))
        .collect()
}

#[derive(Debug, Clone)]
struct Case {
    ty: GgmlType,
    blocks: Vec<(Scale, Scale, Quants)>,
    /// One entry per activation row, one kind per block.
    rows: Vec<Vec<Activation>>,
    seed: u64,
}

fn scale() -> impl Strategy<Value = Scale> {
    prop_oneof![
        1 => Just(Scale::Zero),
        1 => Just(Scale::Subnormal),
        6 => Just(Scale::Ordinary),
        1 => Just(Scale::Largest),
        2 => Just(Scale::Negative),
    ]
}

fn quants() -> impl Strategy<Value = Quants> {
    prop_oneof![
        6 => Just(Quants::Random),
        1 => Just(Quants::AllMin),
        1 => Just(Quants::AllMax),
        1 => Just(Quants::MaxScales),
    ]
}

fn activation() -> impl Strategy<Value = Activation> {
    prop_oneof![
        6 => Just(Activation::Ordinary),
        1 => Just(Activation::Zeros),
        1 => Just(Activation::Tiny),
        1 => Just(Activation::Large),
        2 => Just(Activation::Outlier),
        1 => Just(Activation::Constant),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    let n_blocks = prop_oneof![Just(1usize), Just(3), Just(7), 1usize..=8];
    (
        proptest::sample::select(&TYPES[..]),
        n_blocks,
        1usize..=9,
        any::<u64>(),
    )
        .prop_flat_map(|(ty, n_blocks, n_rows, seed)| {
            let blocks = proptest::collection::vec((scale(), scale(), quants()), n_blocks);
            let rows = proptest::collection::vec(
                proptest::collection::vec(activation(), n_blocks),
                n_rows,
            );
            (blocks, rows).prop_map(move |(blocks, rows)| Case {
                ty,
                blocks,
                rows,
                seed: seed | 1,
            })
        })
}

fn check_case(case: &Case) -> Result<(), TestCaseError> {
    let ty = case.ty;
    let mut rng = Rng(case.seed);
    let w = weight_row(ty, &case.blocks, &mut rng);
    let xs: Vec<Vec<f32>> = case
        .rows
        .iter()
        .map(|kinds| activation_row(kinds, &mut rng))
        .collect();
    let n = case.blocks.len() * 256;
    let scalar = scalar(ty);
    let acts: Vec<Vec<u8>> = xs.iter().map(|x| quantize(&scalar, x)).collect();
    let scalar_dots: Vec<f32> = acts
        .iter()
        .map(|a| scalar.dot(n, &w, a).expect("lengths"))
        .collect();

    // 1. Scalar against the reference.
    let weights = dequantize_row_to_vec(ty, &w).expect("dequantizes");
    for (r, ((x, act), &got)) in xs.iter().zip(&acts).zip(&scalar_dots).enumerate() {
        let xq = dequantize_row_to_vec(GgmlType::Q8_K, act).expect("dequantizes");
        let mag = magnitude(ty, &w, &xq);
        let reference = dot_row(ty, &w, &xq).expect("dot_row");
        check_close(
            &format!("{ty} scalar, row {r}, against dot_row of the quantized activations"),
            got,
            f64::from(reference),
            rounding_bound(mag),
        )?;
        // Against the f32 activations: off by at most Σ|w_i|·|x_i − xq_i|.
        let quantization_error: f64 = weights
            .iter()
            .zip(x.iter().zip(&xq))
            .map(|(&w, (&x, &q))| f64::from(w).abs() * (f64::from(x) - f64::from(q)).abs())
            .sum();
        let exact = dot_row(ty, &w, x).expect("dot_row");
        let bound = quantization_error * (1.0 + 1e-6)
            + rounding_bound(mag)
            + rounding_bound(magnitude(ty, &w, x));
        check_close(
            &format!("{ty} scalar, row {r}, against dot_row of the f32 activations"),
            got,
            f64::from(exact),
            bound,
        )?;
    }

    for kernel in kernels(ty) {
        let isa = kernel.isa().name();
        prop_assert_eq!(kernel.act_type(), GgmlType::Q8_K);
        // 2. The same activation bytes, and dots close to the scalar ones.
        for (r, ((x, act), &expected)) in xs.iter().zip(&acts).zip(&scalar_dots).enumerate() {
            let own = quantize(&kernel, x);
            prop_assert!(
                &own == act,
                "{} {}: row {} quantizes differently",
                ty,
                isa,
                r
            );
            let got = kernel.dot(n, &w, act).expect("lengths");
            // SIMD128's kernels reduce their lanes to the scalar kernel's exact integer sums.
            if kernel.isa() == Isa::Simd128 {
                prop_assert!(
                    got.to_bits() == expected.to_bits(),
                    "{} simd128, row {}: {} is not the scalar {}",
                    ty,
                    r,
                    got,
                    expected
                );
            }
            let xq = dequantize_row_to_vec(GgmlType::Q8_K, act).expect("dequantizes");
            check_close(
                &format!("{ty} {isa}, row {r}, against scalar"),
                got,
                f64::from(expected),
                rounding_bound(magnitude(ty, &w, &xq)),
            )?;
        }
        // 3. dot_many is dot, row by row.
        let packed: Vec<u8> = acts.concat();
        let mut many = vec![f32::NAN; acts.len()];
        kernel.dot_many_unchecked(&w, &packed, &mut many);
        for (r, (act, &got)) in acts.iter().zip(&many).enumerate() {
            let single = kernel.dot_unchecked(&w, act);
            prop_assert!(
                got.to_bits() == single.to_bits(),
                "{} {}: dot_many row {} of {} is {}, dot is {}",
                ty,
                isa,
                r,
                acts.len(),
                got,
                single
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn kernels_agree_with_the_reference_and_each_other(case in case()) {
        check_case(&case)?;
    }
}

/// The types with a GEMM with AVX-512 VNNI.
const GEMM_TYPES: [GgmlType; 3] = [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];
/// The types with a GEMM with AVX2 (and with AVX-512 without VNNI).
#[cfg(target_arch = "x86_64")]
const AVX2_GEMM_TYPES: [GgmlType; 6] = [
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

/// One GEMM case: up to a panel of weight rows (and a row more, which must be left out)
/// against a number of activation rows that exercises every group size of the kernel.
#[derive(Debug, Clone)]
struct GemmCase {
    ty: GgmlType,
    /// One entry per weight row, one block description per super-block.
    rows: Vec<Vec<(Scale, Scale, Quants)>>,
    /// One entry per activation row, one kind per super-block.
    acts: Vec<Vec<Activation>>,
    seed: u64,
}

fn gemm_case(ty: GgmlType) -> impl Strategy<Value = GemmCase> {
    let n_blocks = proptest::sample::select(vec![1usize, 2, 3, 5, 19]);
    (n_blocks, 1usize..=9, 1usize..=19, any::<u64>()).prop_flat_map(
        move |(n_blocks, n_rows, n_acts, seed)| {
            let rows = proptest::collection::vec(
                proptest::collection::vec((scale(), scale(), quants()), n_blocks),
                n_rows,
            );
            let acts = proptest::collection::vec(
                proptest::collection::vec(activation(), n_blocks),
                n_acts,
            );
            (rows, acts).prop_map(move |(rows, acts)| GemmCase {
                ty,
                rows,
                acts,
                seed: seed | 1,
            })
        },
    )
}

/// Every GEMM output equals the same instruction set's `dot` up to the order in which their
/// per-lane f32 terms add up; rows missing from the panel give zeros.
fn check_gemm(case: &GemmCase) -> Result<(), TestCaseError> {
    let ty = case.ty;
    let mut rng = Rng(case.seed);
    let rows: Vec<Vec<u8>> = case
        .rows
        .iter()
        .map(|blocks| weight_row(ty, blocks, &mut rng))
        .collect();
    let xs: Vec<Vec<f32>> = case
        .acts
        .iter()
        .map(|kinds| activation_row(kinds, &mut rng))
        .collect();
    let n = case.rows[0].len() * 256;
    let parts: Vec<_> = rows.iter().map(|w| weight_parts(ty, w)).collect();
    for kernel in kernels(ty) {
        let Some(gemm) = kernel.gemm() else {
            continue;
        };
        let panel_rows = gemm.panel_rows();
        let in_panel = rows.len().min(panel_rows);
        // The rows beyond the panel follow its rows: packing must not read them.
        let all_rows = rows.concat();
        let mut panel = vec![0xAAu8; gemm.panel_bytes(n)];
        gemm.pack_panel_unchecked(&all_rows[..in_panel * rows[0].len()], n, &mut panel);
        let acts: Vec<Vec<u8>> = xs.iter().map(|x| quantize(&kernel, x)).collect();
        let packed_bytes = gemm.act_bytes(n);
        let mut packed = vec![0x55u8; packed_bytes * acts.len()];
        for (act, p) in acts.iter().zip(packed.chunks_exact_mut(packed_bytes)) {
            gemm.pack_act_unchecked(act, p);
        }
        let mut out = vec![f32::NAN; acts.len() * panel_rows];
        gemm.run_unchecked(&panel, &packed, &mut out);
        for (t, act) in acts.iter().enumerate() {
            let xq = dequantize_row_to_vec(GgmlType::Q8_K, act).expect("dequantizes");
            for r in 0..panel_rows {
                let got = out[t * panel_rows + r];
                let Some(w) = rows[..in_panel].get(r) else {
                    prop_assert!(
                        got.to_bits() == 0,
                        "{:?}: empty panel row {}, activation {}: {}",
                        kernel,
                        r,
                        t,
                        got
                    );
                    continue;
                };
                let want = kernel.dot(n, w, act).expect("lengths");
                let (full, base) = &parts[r];
                check_close(
                    &format!(
                        "{kernel:?} GEMM row {r} of {in_panel}, activation {t} of {}, against dot",
                        acts.len()
                    ),
                    got,
                    f64::from(want),
                    rounding_bound(magnitude_of_parts(full, base, &xq)),
                )?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn gemm_q2_k(case in gemm_case(GgmlType::Q2_K)) {
        check_gemm(&case)?;
    }

    #[test]
    fn gemm_q3_k(case in gemm_case(GgmlType::Q3_K)) {
        check_gemm(&case)?;
    }

    #[test]
    fn gemm_q4_k(case in gemm_case(GgmlType::Q4_K)) {
        check_gemm(&case)?;
    }

    #[test]
    fn gemm_q5_k(case in gemm_case(GgmlType::Q5_K)) {
        check_gemm(&case)?;
    }

    #[test]
    fn gemm_q6_k(case in gemm_case(GgmlType::Q6_K)) {
        check_gemm(&case)?;
    }

    #[test]
    fn gemm_iq4_xs(case in gemm_case(GgmlType::IQ4_XS)) {
        check_gemm(&case)?;
    }
}

/// Q4_K, Q5_K and Q6_K have a GEMM where the CPU has AVX-512 VNNI; without it the tests above
/// check nothing, so say so.
#[cfg(target_arch = "x86_64")]
#[test]
fn gemm_types_have_a_gemm_with_vnni() {
    let vnni = Isa::available().contains(&Isa::Avx512Vnni);
    if !plumb_testutil::cpu_has(
        "gemm_types_have_a_gemm_with_vnni",
        Isa::Avx512Vnni.name(),
        vnni,
    ) {
        return;
    }
    for ty in GEMM_TYPES {
        let kernel = DotKernel::for_isa(ty, Isa::Avx512Vnni).expect("a kernel");
        assert!(kernel.gemm().is_some(), "{ty}");
    }
}

/// Q2_K to Q6_K and IQ4_XS have a GEMM where the CPU has AVX2 (the tests above check it with
/// `PLUMB_CPU_ISA` unset, and alone with `PLUMB_CPU_ISA=avx2`).
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_gemm_types_have_a_gemm_with_avx2() {
    let avx2 = Isa::available().contains(&Isa::Avx2);
    if !plumb_testutil::cpu_has(
        "avx2_gemm_types_have_a_gemm_with_avx2",
        Isa::Avx2.name(),
        avx2,
    ) {
        return;
    }
    for ty in AVX2_GEMM_TYPES {
        let kernel = DotKernel::for_isa(ty, Isa::Avx2).expect("a kernel");
        assert!(kernel.gemm().is_some(), "{ty}");
        assert!(kernel.kept_gemm().is_some(), "{ty}");
    }
}

/// Every super-block type has a GEMM where the CPU has NEON's dot-product extension (`sdot`)
/// and i8mm (`smmla`); with `PLUMB_CPU_LACKS` naming them, a CPU without them checks that
/// detection agrees.
#[cfg(target_arch = "aarch64")]
#[test]
fn every_type_has_a_gemm_with_dotprod_and_i8mm() {
    let available = Isa::available();
    for isa in [Isa::NeonDotprod, Isa::NeonI8mm] {
        if !plumb_testutil::cpu_has(
            "every_type_has_a_gemm_with_dotprod_and_i8mm",
            isa.name(),
            available.contains(&isa),
        ) {
            continue;
        }
        for ty in TYPES {
            let kernel = DotKernel::for_isa(ty, isa).expect("a kernel");
            assert!(kernel.gemm().is_some(), "{kernel:?}");
            assert!(kernel.kept_gemm().is_some(), "{kernel:?}");
        }
    }
}

#[test]
fn every_instruction_set_of_this_machine_has_every_kernel() {
    // The instruction sets of the architecture this test is built for; the other
    // architecture's are tested where they run (NEON under qemu: tools/test-aarch64.sh).
    let isas: &[Isa] = if cfg!(target_arch = "x86_64") {
        &[
            Isa::Scalar,
            Isa::Avx2,
            Isa::Avx2Vnni,
            Isa::Avx512,
            Isa::Avx512Vnni,
        ]
    } else if cfg!(target_arch = "aarch64") {
        &[Isa::Scalar, Isa::Neon, Isa::NeonDotprod, Isa::NeonI8mm]
    } else if cfg!(target_arch = "wasm32") {
        &[Isa::Scalar, Isa::Simd128]
    } else {
        &[Isa::Scalar]
    };
    let available = Isa::available();
    for &isa in isas {
        let test = "every_instruction_set_of_this_machine_has_every_kernel";
        if !plumb_testutil::cpu_has(test, isa.name(), available.contains(&isa)) {
            continue;
        }
        for ty in TYPES {
            let kernel = DotKernel::for_isa(ty, isa);
            assert!(kernel.is_some(), "no {} kernel for {ty}", isa.name());
        }
    }
    for ty in TYPES {
        let best = DotKernel::new(ty).expect("a kernel");
        assert_eq!(best.isa(), Isa::detect(), "{ty}");
        assert_eq!(best.act_type(), GgmlType::Q8_K, "{ty}");
    }
}

/// One block with a hand-computed dot product, independent of `dequantize_row`: all quants
/// at their maximum, equal scales and mins, activations of 127 (so Q8_K's scale is exactly
/// −1 and every product is an exact integer in f32).
#[test]
fn q4_k_all_ones_block_gives_the_hand_computed_sum() {
    // d = 1, dmin = 0.5, every 6-bit scale 1 and min 2, every quant 15.
    let mut block = vec![0u8; 144];
    block[0..2].copy_from_slice(&0x3c00u16.to_le_bytes());
    block[2..4].copy_from_slice(&0x3800u16.to_le_bytes());
    block[4..8].fill(1);
    block[8..12].fill(2);
    block[12..16].fill(0x21);
    block[16..144].fill(0xff);
    let x = vec![127.0f32; 256];
    // Each weight is 1·1·15 − 0.5·2 = 14.
    let expected = 14.0 * 127.0 * 256.0;
    for kernel in kernels(GgmlType::Q4_K) {
        let act = quantize(&kernel, &x);
        assert_eq!(
            kernel.dot(256, &block, &act).unwrap(),
            expected,
            "{}",
            kernel.isa().name()
        );
    }
}

/// Single-threaded timings, ns per weight row of k = 4864 (Qwen2.5-0.5B's FFN width), for
/// `dot` and for `dot_many` over 16 activation rows (per weight row and activation row).
/// Run with `cargo test --release -p plumb-ggml --test vec_dot_superblocks -- --ignored
/// --nocapture bench`.
#[test]
#[ignore = "micro-benchmark"]
fn bench_kernels() {
    const K: usize = 4864;
    const WEIGHT_ROWS: usize = 64;
    const ACT_ROWS: usize = 16;
    let mut rng = Rng(0x5eed);
    for ty in TYPES {
        let blocks = vec![(Scale::Ordinary, Scale::Ordinary, Quants::Random); K / 256];
        let matrix: Vec<Vec<u8>> = (0..WEIGHT_ROWS)
            .map(|_| weight_row(ty, &blocks, &mut rng))
            .collect();
        let x = activation_row(&[Activation::Ordinary; K / 256], &mut rng);
        for kernel in kernels(ty) {
            let act = quantize(&kernel, &x);
            let acts = act.repeat(ACT_ROWS);
            let mut out = vec![0f32; ACT_ROWS];
            // The best of several trials: the machine is shared, and the minimum is the
            // kernel's own speed.
            let time = |reps: usize, f: &mut dyn FnMut()| {
                (0..15)
                    .map(|_| {
                        let start = std::time::Instant::now();
                        for _ in 0..reps {
                            f();
                        }
                        start.elapsed().as_nanos() as f64 / reps as f64
                    })
                    .fold(f64::INFINITY, f64::min)
            };
            let mut sink = 0f32;
            let dot_ns = time(100, &mut || {
                for w in &matrix {
                    sink += kernel.dot_unchecked(w, &act);
                }
            }) / WEIGHT_ROWS as f64;
            let many_ns = time(10, &mut || {
                for w in &matrix {
                    kernel.dot_many_unchecked(w, &acts, &mut out);
                    sink += out[0];
                }
            }) / (WEIGHT_ROWS * ACT_ROWS) as f64;
            eprintln!(
                "{ty:>6} {:>12}: dot {dot_ns:8.1} ns/row, dot_many {many_ns:8.1} ns/row{}",
                kernel.isa().name(),
                if sink.is_nan() { " (NaN)" } else { "" }
            );
        }
    }
}

/// Single-threaded timings of the GEMM types at k = 2048 (gemma3-270m's FFN width) and 4864
/// (Qwen2.5-0.5B's), in ns per weight row per activation row: `dot_many` over 32 activation
/// rows and, where there is one, the GEMM over the same rows, with the cost of packing
/// weights (per weight row) and activations (per activation row). Run with `cargo test
/// --release -p plumb-ggml --test vec_dot_superblocks -- --ignored --nocapture bench`.
#[test]
#[ignore = "micro-benchmark"]
fn bench_gemm() {
    use std::hint::black_box;
    const WEIGHT_ROWS: usize = 64;
    const ACT_ROWS: usize = 32;
    let mut rng = Rng(0x6e33);
    let best = |f: &mut dyn FnMut()| {
        (0..15)
            .map(|_| {
                let start = std::time::Instant::now();
                f();
                start.elapsed().as_nanos() as f64
            })
            .fold(f64::INFINITY, f64::min)
    };
    for k in [2048, 4864] {
        for ty in GEMM_TYPES {
            let blocks = vec![(Scale::Ordinary, Scale::Ordinary, Quants::Random); k / 256];
            let weights: Vec<u8> = (0..WEIGHT_ROWS)
                .flat_map(|_| weight_row(ty, &blocks, &mut rng))
                .collect();
            let row_bytes = weights.len() / WEIGHT_ROWS;
            let xs: Vec<Vec<f32>> = (0..ACT_ROWS)
                .map(|_| activation_row(&vec![Activation::Ordinary; k / 256], &mut rng))
                .collect();
            for kernel in kernels(ty) {
                let acts: Vec<u8> = xs.iter().flat_map(|x| quantize(&kernel, x)).collect();
                let mut out = vec![0f32; ACT_ROWS];
                let many = best(&mut || {
                    for w in weights.chunks_exact(row_bytes) {
                        kernel.dot_many_unchecked(w, &acts, &mut out);
                        black_box(&out);
                    }
                }) / (WEIGHT_ROWS * ACT_ROWS) as f64;
                let isa = kernel.isa().name();
                eprintln!("{ty:>5} k={k:<5} {isa:>12}: dot_many {many:6.1} ns/row/act");
                let Some(gemm) = kernel.gemm() else {
                    continue;
                };
                let rows = gemm.panel_rows();
                let panel_bytes = gemm.panel_bytes(k);
                let mut panels = vec![0u8; WEIGHT_ROWS / rows * panel_bytes];
                let pack = best(&mut || {
                    for (w, p) in weights
                        .chunks_exact(rows * row_bytes)
                        .zip(panels.chunks_exact_mut(panel_bytes))
                    {
                        gemm.pack_panel_unchecked(w, k, p);
                    }
                    black_box(&panels);
                }) / WEIGHT_ROWS as f64;
                let act_bytes = kernel.act_row_bytes(k);
                let packed_bytes = gemm.act_bytes(k);
                let mut packed = vec![0u8; ACT_ROWS * packed_bytes];
                let pack_acts = best(&mut || {
                    for (a, p) in acts
                        .chunks_exact(act_bytes)
                        .zip(packed.chunks_exact_mut(packed_bytes))
                    {
                        gemm.pack_act_unchecked(a, p);
                    }
                    black_box(&packed);
                }) / ACT_ROWS as f64;
                let mut out = vec![0f32; ACT_ROWS * rows];
                let run = best(&mut || {
                    for p in panels.chunks_exact(panel_bytes) {
                        gemm.run_unchecked(p, &packed, &mut out);
                        black_box(&out);
                    }
                }) / (WEIGHT_ROWS * ACT_ROWS) as f64;
                eprintln!(
                    "{ty:>5} k={k:<5} {isa:>12}: gemm     {run:6.1} ns/row/act, packing weights {pack:6.1} ns/row, activations {pack_acts:6.1} ns/row"
                );
            }
        }
    }
}
