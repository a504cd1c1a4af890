//! The activation quantizers of this family, scalar: the definition that every instruction
//! set's quantizer must match byte for byte.
//!
//! Q8_0 and Q8_1 follow ggml's x86 `quantize_row_q8_0` / `quantize_row_q8_1`, the code
//! llama.cpp runs on AVX2 and AVX-512 machines, rather than the reference
//! `quantize_row_q8_0_ref` that [`crate::quantize_row`] reproduces. The two differ in two
//! places: the multiplier is 127/amax (the reference uses 1/d with d = amax/127, which can
//! differ in the last bit), and products round half to even (the reference rounds half away
//! from zero). So a quant can differ from the reference's by one where x·127/amax lies at or
//! within an ulp of a half-integer; the stored scale `d` is the same. Both are within d/2 of x.
//!
//! One deliberate departure from ggml: when 127/amax overflows (every value of the block
//! below about 3.7e-37 in magnitude, so d rounds to a zero f16 anyway) the multiplier is 0
//! and the quants are 0, where ggml's conversion produces the "integer indefinite" −128.
//! The dot products are the same, the bytes are defined on every instruction set.
//!
//! NaN and infinite activations give unspecified quants (as in ggml).

use super::formats::{Q8_0_BYTES, Q8_1_BYTES, QK};
use crate::fp::write_f16;

/// The stored scale d = amax/127 and the multiplier that maps the block onto −127..=127.
pub(super) fn q8_scales(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let id = 127.0 / amax;
    (d, if id.is_finite() { id } else { 0.0 })
}

/// Adding and subtracting 1.5·2^23 rounds any |v| < 2^22 to an integer, half to even (the
/// sum lies where the f32 spacing is 1). `f32::round_ties_even` would be a libm call on
/// targets without SSE4.1.
const ROUND_TIES_EVEN: f32 = 12_582_912.0;

/// One quant: x·id rounded half to even. |x·id| ≤ 127 for finite x, so the cast never
/// saturates.
fn q8(x: f32, id: f32) -> i8 {
    ((x * id + ROUND_TIES_EVEN) - ROUND_TIES_EVEN) as i8
}

fn amax(x: &[f32]) -> f32 {
    x.iter().fold(0.0f32, |m, v| m.max(v.abs()))
}

pub(super) fn q8_0(x: &[f32], out: &mut [u8]) {
    for (x, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, id) = q8_scales(amax(x));
        write_f16(b, 0, d);
        for (q, &v) in b[2..].iter_mut().zip(x) {
            *q = q8(v, id) as u8;
        }
    }
}

/// As [`q8_0`], plus s = d·Σq with the unrounded d, as ggml.
pub(super) fn q8_1(x: &[f32], out: &mut [u8]) {
    for (x, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, id) = q8_scales(amax(x));
        write_f16(b, 0, d);
        let mut sum = 0i32;
        for (q, &v) in b[4..].iter_mut().zip(x) {
            let qi = q8(v, id);
            *q = qi as u8;
            sum += i32::from(qi);
        }
        write_f16(b, 2, d * sum as f32);
    }
}

/// f32 → f16, rounding to nearest even (ggml's `ggml_cpu_fp32_to_fp16`, which on x86 is
/// F16C's `vcvtps2ph` with the same rounding).
pub(super) fn f16(x: &[f32], out: &mut [u8]) {
    crate::float::quantize_f16(x, out)
}

/// f32 → bf16, rounding to nearest even with subnormals kept, as ggml's scalar
/// `ggml_compute_fp32_to_bf16`.
pub(super) fn bf16(x: &[f32], out: &mut [u8]) {
    crate::float::quantize_bf16(x, out)
}

pub(super) fn f32(x: &[f32], out: &mut [u8]) {
    crate::float::quantize_f32(x, out)
}
