//! Matrix products with quantized weights, dequantizing a few rows at a time so that no
//! weight matrix is ever held in f32 as a whole.

use plumb_ggml::{dequantize_row, KernelError};
use plumb_model::{Activations, WeightTensor};
use rayon::prelude::*;

use crate::tensor::HostTensor;

/// Weight rows dequantized together; they are then multiplied with every token while hot in
/// cache.
const ROWS_PER_TASK: usize = 8;

/// `x · Wᵀ` for `x` of shape `[n × k]` and `W` of GGUF shape `[k, m]`: `out[t][j] = W_j · x_t`.
/// The caller has checked that `x` is `k` wide.
pub fn matmul(x: &HostTensor, w: &WeightTensor) -> Result<HostTensor, KernelError> {
    let (n, k, m) = (x.n_tokens(), w.row_len(), w.n_rows());
    // Computed transposed, `[m × n]`, so that each task owns whole rows of its output.
    let mut out_t = vec![0.0f32; m * n];
    if n > 0 {
        out_t
            .par_chunks_mut(ROWS_PER_TASK * n)
            .enumerate()
            .try_for_each(|(task, out)| {
                let first = task * ROWS_PER_TASK;
                let n_rows = out.len() / n;
                let mut rows = vec![0.0f32; n_rows * k];
                for (r, row) in rows.chunks_exact_mut(k).enumerate() {
                    dequantize_row(w.ggml_type(), w.row_bytes(first + r), row)?;
                }
                for (t, x_t) in x.rows().enumerate() {
                    for (r, row) in rows.chunks_exact(k).enumerate() {
                        out[r * n + t] = dot(row, x_t);
                    }
                }
                Ok(())
            })?;
    }
    let mut out = vec![0.0f32; n * m];
    for (j, column) in out_t.chunks_exact(n.max(1)).enumerate() {
        for (t, &value) in column.iter().enumerate() {
            out[t * m + j] = value;
        }
    }
    Ok(HostTensor::new(n, m, out))
}

/// Rows `ids` of a table of GGUF shape `[width, n_rows]`, dequantized. The caller has checked
/// that every id is a row of the table.
pub fn lookup_rows(table: &WeightTensor, ids: &[u32]) -> Result<HostTensor, KernelError> {
    let width = table.row_len();
    let mut out = HostTensor::zeros(ids.len(), width);
    for (row, &id) in out.rows_mut().zip(ids) {
        dequantize_row(table.ggml_type(), table.row_bytes(id as usize), row)?;
    }
    Ok(out)
}

/// A whole (small) tensor dequantized: norm weights and biases.
pub fn to_f32(w: &WeightTensor) -> Result<Vec<f32>, KernelError> {
    let mut out = vec![0.0f32; w.n_elements()];
    dequantize_row(w.ggml_type(), w.bytes(), &mut out)?;
    Ok(out)
}

/// The dot product in a fixed order: sixteen running sums, element `i` into sum `i mod 16`,
/// then the elements after the last whole sixteen, then the sums pairwise (`s_j + s_{j+8}`)
/// and those eight in order. Independent sums are what let it vectorize (a single running
/// sum is a chain the compiler may not reorder); plain arrays of them need no SIMD crate.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let a_blocks = a.chunks_exact(16);
    let b_blocks = b.chunks_exact(16);
    let tail: f32 = a_blocks
        .remainder()
        .iter()
        .zip(b_blocks.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut sums = [0.0f32; 16];
    for (x, y) in a_blocks.zip(b_blocks) {
        for ((s, x), y) in sums.iter_mut().zip(x).zip(y) {
            *s += x * y;
        }
    }
    let pairs: [f32; 8] = std::array::from_fn(|j| sums[j] + sums[j + 8]);
    pairs.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_a_plain_sum() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.25).collect();
        let plain: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        assert!((f64::from(dot(&a, &b)) - plain).abs() < 1e-3);
    }
}
