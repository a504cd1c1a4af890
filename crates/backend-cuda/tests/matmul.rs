//! The matrix products and embedding lookups of the CUDA backend against the f64 product of
//! `plumb_ggml`'s dequantized weights: every supported type, decoding (1 to 8 rows, the
//! matrix-vector kernels), batched decoding (up to 16 rows, the 8-bit kernels in groups of 8;
//! 4 to 64 on the tensor cores for Q4_K and Q6_K) and prefill (cuBLAS) row counts, rows whose
//! alignment varies, huge activations next to small ones, and lookups bit for bit.

mod common;

use common::{no_kv, run, weight, with_pass};
use plumb_backend_cuda::CudaBackend;
use plumb_gguf::GgmlType;
use plumb_model::{Backend, Projection};
use plumb_testutil::Rng;

const TYPES: [GgmlType; 13] = {
    use GgmlType::*;
    [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16, F32,
    ]
};

/// 1 to 8 rows take the matrix-vector kernels. 9, 11 (a group of 8, then 3 rows) and 16 (two
/// groups) take the batched 8-bit kernels for `Q8_TYPES`, cuBLAS for the others; 17 and more
/// take cuBLAS, except for `TENSOR_CORE_TYPES`, whose tensor-core kernels take 4 to 64 rows
/// (tiles of 8, 16, 32 or 64 rows: 9, 17 and 33 leave most of a tile empty; int8 products up to
/// 16, the weights in f16 from 17); 65 takes cuBLAS.
const ROW_COUNTS: [usize; 12] = [1, 2, 3, 8, 9, 11, 16, 17, 32, 33, 64, 65];

/// The matrix-vector kernels accumulate in f32 in another order than the f64 reference.
const TOL_MATVEC: f32 = 2e-5;
/// The types whose matrix-vector kernels quantize the activations to 8 bits (blocks of 32, a
/// step of max |x| / 127): a relative error of about 4e-3 (standard deviation) per product of
/// uniform values, as the cpu backend's and llama.cpp's. Against the largest of as few as 3
/// products the worst seen was 2.2e-2 (Q4_0, 3 × 256); a wrong layout is off by about 1.
const Q8_TYPES: [GgmlType; 7] = {
    use GgmlType::*;
    [Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K]
};
const TOL_Q8: f32 = 4e-2;
/// The types whose products of 4 to 64 rows run on the tensor cores, with the same 8-bit
/// activations.
const TENSOR_CORE_TYPES: [GgmlType; 2] = [GgmlType::Q4_K, GgmlType::Q6_K];
/// cuBLAS multiplies f16 operands (the weight rounded to f16, the activations scaled to f16),
/// or TF32 ones for F32 and BF16 weights: 11 bits of mantissa each, a relative error of about
/// 5e-4 per product, which partly cancels over a row.
const TOL_GEMM: f32 = 2e-3;

fn tolerance(ty: GgmlType, n: usize) -> f32 {
    let q8 = Q8_TYPES.contains(&ty) && n <= 16;
    let tensor_core = TENSOR_CORE_TYPES.contains(&ty) && n <= 64;
    if q8 || tensor_core {
        TOL_Q8
    } else if n > 8 {
        TOL_GEMM
    } else {
        TOL_MATVEC
    }
}

/// `x` (n × k) times the transpose of `w` (m × k) in f64.
fn product(x: &[f32], w: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
    let mut y = vec![0.0; n * m];
    for i in 0..n {
        for r in 0..m {
            let dot: f64 = (0..k)
                .map(|c| f64::from(x[i * k + c]) * f64::from(w[r * k + c]))
                .sum();
            y[i * m + r] = dot as f32;
        }
    }
    y
}

/// The weights as the backend sees them: `values` quantized to `ty` and dequantized.
fn dequantized(tensor: &plumb_model::WeightTensor, ty: GgmlType) -> Vec<f32> {
    plumb_ggml::dequantize_row_to_vec(ty, tensor.bytes()).unwrap()
}

/// max |got − want| / max |want|.
fn rel_diff(got: &[f32], want: &[f32]) -> f32 {
    common::synthetic::max_rel_diff(got, want)
}

/// Checks y = x · Wᵀ for a random m × k weight of type `ty` and each row count.
fn check_products(cuda: &CudaBackend, rng: &mut Rng, ty: GgmlType, k: usize, m: usize) {
    check_products_within(cuda, rng, ty, k, m, &ROW_COUNTS, |n| tolerance(ty, n));
}

/// Checks y = x · Wᵀ for a random m × k weight of type `ty` and each of `row_counts`, within
/// `tolerance(n)` for n rows.
fn check_products_within(
    cuda: &CudaBackend,
    rng: &mut Rng,
    ty: GgmlType,
    k: usize,
    m: usize,
    row_counts: &[usize],
    tolerance: impl Fn(usize) -> f32,
) {
    let values = rng.values(m * k, 1.0);
    let (tensor, w) = weight(cuda, "w", ty, &[k, m], &values);
    let wf = dequantized(&tensor, ty);
    for &n in row_counts {
        let x = rng.values(n * k, 1.0);
        let want = product(&x, &wf, n, k, m);
        let got = cuda
            .to_host(
                &cuda
                    .matmul(&cuda.upload(n, k, x.clone()).unwrap(), &w)
                    .unwrap(),
            )
            .unwrap();
        let diff = rel_diff(&got, &want);
        assert!(
            diff <= tolerance(n),
            "{ty} {m} × {k}, {n} rows: relative difference {diff:e} > {:e}",
            tolerance(n)
        );
    }
}

#[test]
fn every_type_matches_the_f64_product() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(11);
    for ty in TYPES {
        // 768 = 3 super-blocks: rows of Q3_K (330 bytes) start 2 bytes off a 4-byte boundary
        // every other row, Q8_0 rows (816) at every alignment of 16; Q6_K's 37 rows of 3
        // blocks (repacked: 624 bytes a row) put their scales' plane at 23,088 bytes.
        check_products(&cuda, &mut rng, ty, 768, 37);
    }
}

#[test]
fn long_rows_and_one_block_rows_match() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(12);
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
    ] {
        // More chunks than a warp takes in one step, and a row of one super-block (fewer
        // chunks than lanes).
        check_products(&cuda, &mut rng, ty, 4352, 5);
        check_products(&cuda, &mut rng, ty, 256, 3);
    }
}

/// A single activation row takes one weight row a warp, and for Q4_0 and Q8_0 two from launches
/// of 4096 weight rows on (`WIDE_ROWS` in matmul.rs), whose grid has half the blocks: each
/// output row must be its own, with row counts just below and above that (the last warp's
/// second row past the end), alone and as Q, K and V sharing a launch (4000, 50 and 47 rows:
/// product boundaries inside a block of 8 rows).
#[test]
fn launches_of_many_rows_take_two_rows_a_warp() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(18);
    let k = 256;
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        for m in [4095, 4097] {
            check_products_within(&cuda, &mut rng, ty, k, m, &[1], |_| TOL_Q8);
        }
        check_qkv(&cuda, &mut rng, [ty; 3], [4000, 50, 47], k, &[1]);
    }
}

/// The tensor-core kernels split a weight's super-blocks into slices when its blocks of 64 rows
/// are few, and the last slice of a block adds the others' sums: weights of 1 to 3 blocks with
/// rows of 1 to 17 super-blocks (slices of one and of several), ragged row counts, and a weight
/// of more blocks than the grid wants (no slices), for each tile of rows.
#[test]
fn tensor_core_slices_and_ragged_rows_match() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(17);
    for ty in TENSOR_CORE_TYPES {
        for (k, m) in [(256, 1), (512, 63), (4352, 130), (1024, 192), (256, 20000)] {
            check_products_within(&cuda, &mut rng, ty, k, m, &[5, 9, 24, 40, 64], |_| TOL_Q8);
        }
    }
}

/// From 17 rows (`tensor_core_kernel` in matmul.rs, whose host test keeps 16 and 64 rows on
/// different kernels) the tensor-core products take the weights dequantized to f16
/// (mmq_f16.cu), up to 16 their int8 quants with each block's sum scaled in f32 (mmq_tc.cu), on
/// the same 8-bit rows (each row quantized alone): 64 rows at once must give each 16 rows'
/// products of the int8 kernels but for the f16 rounding of the weights and values (a relative
/// 2^-11 or less each), far within `TOL_Q8`; a wrong scale, min or order of values is off by
/// more than 1e-2.
#[test]
fn f16_tensor_core_products_match_the_int8_ones() {
    const TOL_F16_WEIGHTS: f32 = 2e-3;
    let cuda = require_cuda!();
    let mut rng = Rng::new(19);
    let (n, part) = (64, 16);
    for ty in TENSOR_CORE_TYPES {
        for (k, m) in [(768, 37), (4352, 130)] {
            let (_, w) = weight(&cuda, "w", ty, &[k, m], &rng.values(m * k, 1.0));
            let x = rng.values(n * k, 1.0);
            let product = |rows: &[f32]| {
                let x = cuda.upload(rows.len() / k, k, rows.to_vec()).unwrap();
                cuda.to_host(&cuda.matmul(&x, &w).unwrap()).unwrap()
            };
            let all = product(&x);
            for (i, rows) in x.chunks(part * k).enumerate() {
                let diff = rel_diff(&all[i * part * m..(i + 1) * part * m], &product(rows));
                assert!(
                    diff <= TOL_F16_WEIGHTS,
                    "{ty} {m} × {k}, rows {} .. {}: relative difference {diff:e} > \
                     {TOL_F16_WEIGHTS:e}",
                    i * part,
                    (i + 1) * part
                );
            }
        }
    }
}

/// Q, K and V of one type share a launch of the 8-bit kernels, each product its own blocks of
/// the grid: each output must be its own weight's product, for row counts of every launch kind
/// (one row, a few, groups of 8 and the rows left; for Q4_K and Q6_K up to 3 rows, then the
/// tensor cores), with row counts that leave blocks partly empty, and where V's type differs
/// (a launch of its own after Q and K).
#[test]
fn qkv_products_sharing_a_launch_match() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(14);
    for types in [
        [GgmlType::Q4_K; 3],
        [GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K],
        [GgmlType::Q8_0; 3],
    ] {
        check_qkv(
            &cuda,
            &mut rng,
            types,
            [37, 5, 11],
            768,
            &[1, 2, 3, 8, 11, 16, 17, 64],
        );
    }
}

/// Checks Q, K and V of `types`, `shapes` rows of k each, through the backend's `qkv` (the
/// products of one type sharing a launch), for each of `row_counts`: each output must be its own
/// weight's product.
fn check_qkv(
    cuda: &CudaBackend,
    rng: &mut Rng,
    types: [GgmlType; 3],
    shapes: [usize; 3],
    k: usize,
    row_counts: &[usize],
) {
    let weights: Vec<_> = types
        .iter()
        .zip(shapes)
        .map(|(&ty, m)| {
            let (tensor, w) = weight(cuda, "w", ty, &[k, m], &rng.values(m * k, 1.0));
            (dequantized(&tensor, ty), w, m)
        })
        .collect();
    let p = |i: usize| Projection {
        weight: &weights[i].1,
        bias: None,
    };
    for &n in row_counts {
        let x = rng.values(n * k, 1.0);
        let got = cuda
            .qkv(&cuda.upload(n, k, x.clone()).unwrap(), p(0), p(1), p(2))
            .unwrap();
        for (i, (y, (wf, _, m))) in got.iter().zip(&weights).enumerate() {
            let diff = rel_diff(&cuda.to_host(y).unwrap(), &product(&x, wf, n, k, *m));
            assert!(
                diff <= TOL_Q8,
                "{types:?}, product {i} ({m} × {k}), {n} rows: relative difference {diff:e} > \
                 {TOL_Q8:e}"
            );
        }
    }
}

#[test]
fn float_rows_of_any_length_match() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(13);
    // Rows that are no whole number of 16-byte loads go to cuBLAS at every row count.
    for (ty, k) in [
        (GgmlType::F16, 100),
        (GgmlType::BF16, 100),
        (GgmlType::F32, 102),
        (GgmlType::F32, 100),
    ] {
        let values = rng.values(7 * k, 1.0);
        let (tensor, w) = weight(&cuda, "w", ty, &[k, 7], &values);
        let wf = dequantized(&tensor, ty);
        for n in [1, 3, 17] {
            let x = rng.values(n * k, 1.0);
            let want = product(&x, &wf, n, k, 7);
            let got = cuda
                .to_host(
                    &cuda
                        .matmul(&cuda.upload(n, k, x.clone()).unwrap(), &w)
                        .unwrap(),
                )
                .unwrap();
            let diff = rel_diff(&got, &want);
            let whole_loads = k % if ty == GgmlType::F32 { 4 } else { 8 } == 0;
            let tol = if n <= 8 && whole_loads {
                TOL_MATVEC
            } else {
                TOL_GEMM
            };
            assert!(diff <= tol, "{ty} 7 × {k}, {n} rows: {diff:e} > {tol:e}");
        }
    }
}

/// One activation 1e5 times the others, in a column whose weights are exactly zero: the
/// product is the small values' alone, and must keep their precision (quantizing the
/// activations to 8 bits per block would round them all to zero).
#[test]
fn huge_activations_leave_small_ones_intact() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(14);
    let (k, m, outlier) = (512, 9, 37);
    // Symmetric types store an exact zero.
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q6_K,
        GgmlType::F16,
    ] {
        let mut values = rng.values(m * k, 1.0);
        for r in 0..m {
            values[r * k + outlier] = 0.0;
        }
        let (tensor, w) = weight(&cuda, "w", ty, &[k, m], &values);
        let wf = dequantized(&tensor, ty);
        assert!((0..m).all(|r| wf[r * k + outlier] == 0.0));
        for n in [1, 11, 17] {
            let mut x = rng.values(n * k, 1.0);
            for i in 0..n {
                x[i * k + outlier] = 1e5;
            }
            let want = product(&x, &wf, n, k, m);
            let got = cuda
                .to_host(
                    &cuda
                        .matmul(&cuda.upload(n, k, x.clone()).unwrap(), &w)
                        .unwrap(),
                )
                .unwrap();
            let diff = rel_diff(&got, &want);
            assert!(
                diff <= tolerance(ty, n),
                "{ty}, {n} rows with an outlier: {diff:e} > {:e}",
                tolerance(ty, n)
            );
        }
    }
}

/// A first-token-like row, as Qwen2.5 1.5B's: a 4000 among values of magnitude about 1, whose
/// weight column is not zero. The 8-bit kernels split it off (its products are added in f32)
/// and quantize the rest, so the small values' part of each product keeps the precision it
/// would have without the outlier. Quantized with it, the 31 other values of its block would
/// round to zero: an error of about a quarter of that part at k = 512.
#[test]
fn outliers_are_split_off_before_quantizing() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(16);
    let (k, m) = (512, 9);
    for ty in Q8_TYPES {
        let values = rng.values(m * k, 1.0);
        let (tensor, w) = weight(&cuda, "w", ty, &[k, m], &values);
        let wf = dequantized(&tensor, ty);
        // 11 rows: a group of 8 and 3 rows, each with its own rows' outliers; 40 rows (on the
        // tensor cores) for the types that take them.
        let counts: &[usize] = match TENSOR_CORE_TYPES.contains(&ty) {
            true => &[1, 3, 11, 40],
            false => &[1, 3, 11],
        };
        for &n in counts {
            let small = rng.values(n * k, 1.0);
            let mut x = small.clone();
            // Every row has one, in another block than the row before; the last row a second one.
            for i in 0..n {
                x[i * k + (37 + 64 * i) % k] = if i % 2 == 0 { 4000.0 } else { -4000.0 };
            }
            x[n * k - 3] = 2500.0;
            let want = product(&x, &wf, n, k, m);
            let want_small = product(&small, &wf, n, k, m);
            let got = cuda
                .to_host(
                    &cuda
                        .matmul(&cuda.upload(n, k, x.clone()).unwrap(), &w)
                        .unwrap(),
                )
                .unwrap();
            let scale = want_small.iter().fold(0.0f32, |a, v| a.max(v.abs()));
            let err = got
                .iter()
                .zip(&want)
                .fold(0.0f32, |a, (g, w)| a.max((g - w).abs()));
            assert!(
                err <= TOL_Q8 * scale,
                "{ty}, {n} rows with outliers: error {err:e} > {TOL_Q8:e} × {scale:e}, the \
                 largest product of the small values"
            );
        }
    }
}

/// The rows of `table` for `tokens`, looked up in a pass of their own.
fn embed(
    cuda: &CudaBackend,
    table: &plumb_backend_cuda::CudaWeight,
    tokens: &[u32],
) -> plumb_backend_cuda::CudaTensor {
    let places = run(0, 0, tokens.len());
    with_pass(
        cuda,
        &mut no_kv(cuda, tokens.len()),
        tokens,
        &places,
        &[],
        |pass, _| cuda.embed(table, pass),
    )
    .unwrap()
}

#[test]
fn get_rows_is_bit_exact() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(15);
    let (k, m) = (768, 11);
    for ty in TYPES {
        let values: Vec<f32> = rng.values(m * k, 3.0);
        let (tensor, w) = weight(&cuda, "token_embd.weight", ty, &[k, m], &values);
        let wf = dequantized(&tensor, ty);
        let tokens = [3u32, 0, 10, 3, 7];
        let got = cuda.to_host(&embed(&cuda, &w, &tokens)).unwrap();
        for (i, &t) in tokens.iter().enumerate() {
            let want = &wf[t as usize * k..(t as usize + 1) * k];
            let row = &got[i * k..(i + 1) * k];
            let same = row
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{ty}: row {t} differs from plumb_ggml's dequantization"
            );
        }
    }
    // Float rows of any length.
    for ty in [GgmlType::F16, GgmlType::BF16, GgmlType::F32] {
        let values = rng.values(5 * 13, 1.0);
        let (tensor, w) = weight(&cuda, "token_embd.weight", ty, &[13, 5], &values);
        let wf = dequantized(&tensor, ty);
        let got = cuda.to_host(&embed(&cuda, &w, &[4, 1])).unwrap();
        let want: Vec<f32> = [4, 1]
            .iter()
            .flat_map(|&t| wf[t * 13..t * 13 + 13].to_vec())
            .collect();
        assert!(
            got.iter()
                .zip(&want)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{ty}: rows of 13 differ"
        );
    }
}
