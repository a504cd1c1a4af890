//! Activation outliers: values so much larger than the rest of their row that quantizing the
//! row to 8 bits would round their neighbours to zero.
//!
//! Qwen2.5 models from 1.5B up carry activations in the thousands on their first token, and in
//! late layers these cancel against the residual stream: an FFN output and a residual of about
//! ±4,000 whose sum is small. ggml quantizes each block of 32 or 256 activations with one
//! scale, so a block holding a 4,000 has a step of about 31 and every ordinary value in it
//! becomes 0; the FFN output's error is then as large as the layer's output, and llama.cpp's
//! first-token distribution is far from exact math (KL 2 to 6 on Qwen2.5-Coder-1.5B).
//!
//! plumb splits such values off before quantizing, as LLM.int8() does, decided per row at run
//! time: the row without them is quantized as usual, and their products with the weight
//! columns they meet are computed in f32 from the dequantized weights and added to the result.

use plumb_backend_ref::HostTensor;
use plumb_ggml::{DotKernel, GgmlType};
use plumb_model::{Activations, WeightTensor};

use crate::pool::{split, ThreadPool};
use crate::shared_out::SharedOut;

/// A value is an outlier when its magnitude exceeds this multiple of its row's mean magnitude.
/// The largest of a few thousand Gaussian values is about 5× their mean magnitude, so ordinary
/// rows never take the split, and Qwen2.5's first-token activations (thousands against a mean
/// near 1) always do. At 32× about a tenth of rows split (heavy tails), and on gemma3-270m's
/// golden `code` prompt one firm top-1 then moved away from llama.cpp's and the reference's;
/// why is not yet understood, so the factor stays where only extreme rows split.
const OUTLIER_FACTOR: f32 = 128.0;

/// Lanes of the running sums below: wide enough for the compiler to vectorize them.
const LANES: usize = 16;

/// The outliers of activation row `token`: (column, value), by column.
#[derive(Debug, Clone, PartialEq)]
pub struct RowOutliers {
    pub token: usize,
    pub columns: Vec<(usize, f32)>,
}

/// Whether products with `kernel` quantize their activations to 8 bits (and so can lose small
/// values beside large ones); float weights take f16, bf16 or f32 activations.
pub fn quantizes_to_8_bits(kernel: &DotKernel) -> bool {
    matches!(
        kernel.act_type(),
        GgmlType::Q8_0 | GgmlType::Q8_1 | GgmlType::Q8_K
    )
}

/// The outliers of row `x`, or `None` for an ordinary row (the common case: one pass that
/// sums and maximizes magnitudes). A row with a NaN or an infinity has none: it is wrong
/// already, and the plain path carries that through.
pub fn find(x: &[f32]) -> Option<Vec<(usize, f32)>> {
    let mut sum = [0.0f32; LANES];
    let mut max = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for l in 0..LANES {
            sum[l] += chunk[l].abs();
            max[l] = max[l].max(chunk[l].abs());
        }
    }
    for (l, v) in tail.iter().enumerate() {
        sum[l] += v.abs();
        max[l] = max[l].max(v.abs());
    }
    let mean = sum.iter().sum::<f32>() / x.len().max(1) as f32;
    let max = max.iter().copied().fold(0.0f32, f32::max);
    let threshold = OUTLIER_FACTOR * mean;
    if !mean.is_finite() || max <= threshold {
        return None;
    }
    Some(
        x.iter()
            .enumerate()
            .filter(|(_, v)| v.abs() > threshold)
            .map(|(j, &v)| (j, v))
            .collect(),
    )
}

/// `x` with `columns` zeroed: what is left to quantize.
pub fn without(x: &[f32], columns: &[(usize, f32)]) -> Vec<f32> {
    let mut rest = x.to_vec();
    for &(j, _) in columns {
        rest[j] = 0.0;
    }
    rest
}

/// Adds each outlier's products with its weight column to `out`, `[n_tokens × m]` for the
/// `m` rows of `w`: `out[t][i] += W[i][j] · x[t][j]`. Each weight row's blocks that hold an
/// outlier column are dequantized once.
pub fn add_products(
    pool: &ThreadPool,
    w: &WeightTensor,
    outliers: &[RowOutliers],
    out: &mut HostTensor,
) {
    let ty = w.ggml_type();
    let (m, block) = (w.n_rows(), ty.block_size());
    let weights = w.bytes();
    let row_bytes = weights.len() / m;
    let mut blocks: Vec<usize> = outliers
        .iter()
        .flat_map(|r| r.columns.iter().map(|&(j, _)| j / block))
        .collect();
    blocks.sort_unstable();
    blocks.dedup();
    let width = out.width();
    let shared = SharedOut::new(out.data_mut());
    pool.run(&|i| {
        let mut values = vec![0.0f32; block];
        for row in split(m, i, pool.n_threads(), 1) {
            let bytes = &weights[row * row_bytes..(row + 1) * row_bytes];
            for &b in &blocks {
                let block_bytes = &bytes[b * ty.block_bytes()..(b + 1) * ty.block_bytes()];
                plumb_ggml::dequantize_row(ty, block_bytes, &mut values)
                    .expect("a matrix's type was checked at load");
                for r in outliers {
                    for &(j, v) in r.columns.iter().filter(|(j, _)| j / block == b) {
                        // SAFETY: output column `row` of every token belongs to this thread.
                        let o = unsafe { shared.slice(r.token * width + row, 1) };
                        o[0] += values[j % block] * v;
                    }
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ordinary_row(n: usize) -> Vec<f32> {
        // Deterministic values of magnitude about 1, signs mixed.
        (0..n)
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect()
    }

    #[test]
    fn ordinary_rows_have_none() {
        assert_eq!(find(&ordinary_row(4096)), None);
        assert_eq!(find(&[0.0; 64]), None);
        assert_eq!(find(&[]), None);
    }

    #[test]
    fn values_far_above_the_mean_magnitude_are_found() {
        let mut x = ordinary_row(1536);
        x[5] = 4000.0;
        x[900] = -2500.0;
        assert_eq!(find(&x), Some(vec![(5, 4000.0), (900, -2500.0)]));
        let rest = without(&x, &[(5, 4000.0), (900, -2500.0)]);
        assert_eq!((rest[5], rest[900], rest[6]), (0.0, 0.0, x[6]));
    }

    #[test]
    fn rows_that_are_wrong_already_are_left_alone() {
        let mut x = ordinary_row(256);
        x[3] = f32::NAN;
        assert_eq!(find(&x), None);
        x[3] = f32::INFINITY;
        assert_eq!(find(&x), None);
    }
}
