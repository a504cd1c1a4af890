//! The reference dot product: plainly correct, not fast.

use crate::{check_lengths, dequantizer, GgmlType, KernelError, QK_K};

/// The dot product of one weight row of type `ty` (exactly the blocks for `x.len()` values)
/// with f32 activations `x`.
///
/// Each block is dequantized exactly as ggml dequantizes it, and products are summed in f64,
/// so the result is the exact dot product of the dequantized row with `x`, rounded once to f32
/// at the end (up to f64 rounding, far below f32 resolution). This is the yardstick that SIMD
/// and GPU kernels are measured against; it makes no attempt at speed.
pub fn dot_row(ty: GgmlType, row: &[u8], x: &[f32]) -> Result<f32, KernelError> {
    let dequantize = dequantizer(ty).ok_or(KernelError::UnsupportedType {
        ty,
        operation: "dot product",
    })?;
    check_lengths(ty, x.len(), row.len())?;

    let block_size = ty.block_size();
    // Plain types have one-element "blocks": take many at once to keep the loop cheap.
    let elements_per_step = if block_size == 1 { QK_K } else { block_size };
    let bytes_per_step = elements_per_step / block_size * ty.block_bytes();
    let mut buf = [0f32; QK_K];
    let mut sum = 0f64;
    for (bytes, xs) in row.chunks(bytes_per_step).zip(x.chunks(elements_per_step)) {
        let w = &mut buf[..xs.len()];
        dequantize(bytes, w);
        sum += w
            .iter()
            .zip(xs)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum::<f64>();
    }
    Ok(sum as f32)
}
