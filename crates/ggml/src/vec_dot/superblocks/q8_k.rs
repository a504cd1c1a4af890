//! Q8_K, the activation format of every super-block type (ggml's `block_q8_K`): f32 `d`,
//! 256 i8 `qs` and 16 i16 `bsums` (the sums of each 16 `qs`, which the kernels use to apply
//! the weights' mins and offsets to whole sub-blocks at once).
//!
//! The quantizer is ggml's `quantize_row_q8_K_ref`, [`crate::quantize_row`]'s Q8_K: the value
//! of largest magnitude (the first, on ties) maps to −127, `iscale = −127 / max`, and each
//! `q = nearest_int(iscale · x)` rounds half to even by adding 1.5·2²³ and reading the
//! mantissa bits. The SIMD quantizers do the very same f32 operations (one multiply, one add,
//! integer bit arithmetic, truncation to 8 bits), so they give the same bytes for every input,
//! including non-finite ones.

pub(super) const Q8_K_BYTES: usize = 292;
pub(super) const QS: usize = 4;
pub(super) const BSUMS: usize = 260;

/// The block's scale.
#[inline(always)]
pub(super) fn d(block: &[u8]) -> f32 {
    f32::from_le_bytes([block[0], block[1], block[2], block[3]])
}

/// The block's 256 quants.
#[inline(always)]
pub(super) fn qs(block: &[u8]) -> &[u8] {
    &block[QS..QS + 256]
}

/// The sum of quants `16j .. 16j + 16`.
#[inline(always)]
pub(super) fn bsum(block: &[u8], j: usize) -> i32 {
    i32::from(i16::from_le_bytes([
        block[BSUMS + 2 * j],
        block[BSUMS + 2 * j + 1],
    ]))
}

/// The portable quantizer: the reference itself.
pub(super) fn quantize_scalar(x: &[f32], out: &mut [u8]) {
    crate::k_quants::quantize_q8_k(x, out);
}
