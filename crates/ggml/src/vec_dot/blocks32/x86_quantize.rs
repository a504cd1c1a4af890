//! The x86 activation quantizers, for every x86 instruction set ([`Isa::Avx2`] and both
//! AVX-512 ones): AVX2 + FMA + F16C code, as ggml's `quantize_row_q8_0` / `_q8_1`. An
//! activation row is quantized once for a whole weight matrix, so wider registers would not
//! pay.
//!
//! Each gives the same bytes as the scalar quantizer in `quantize`: the block maximum is
//! exact whatever the order, the scales come from the same `q8_scales`, x·id is one IEEE
//! product either way, and the conversion rounds half to even as `round_ties_even` does.
//! (For NaN inputs the bytes may differ; those are unspecified.)

use std::arch::x86_64::*;

use super::formats::{Q8_0_BYTES, Q8_1_BYTES, QK};
use super::quantize::{self, q8_scales};

pub(super) fn q8_0(x: &[f32], out: &mut [u8]) {
    // SAFETY: only reachable through `KernelFns` of the x86 instruction sets, which
    // `DotKernel` hands out after `Isa::available()` confirmed AVX2, FMA and F16C.
    unsafe { q8_0_avx2(x, out) }
}

pub(super) fn q8_1(x: &[f32], out: &mut [u8]) {
    // SAFETY: as for `q8_0`.
    unsafe { q8_1_avx2(x, out) }
}

/// f32 → f16 with F16C's round to nearest even, as ggml's `ggml_cpu_fp32_to_fp16`.
pub(super) fn f16(x: &[f32], out: &mut [u8]) {
    // SAFETY: as for `q8_0`.
    unsafe { f16_avx2(x, out) }
}

/// f32 → bf16, ggml's rounding (nearest even, NaNs made quiet) in integer lanes.
pub(super) fn bf16(x: &[f32], out: &mut [u8]) {
    // SAFETY: as for `q8_0`.
    unsafe { bf16_avx2(x, out) }
}

/// One block: its scale d and its quants as i32 lanes, in order.
#[inline(always)]
unsafe fn q8_block(x: &[f32]) -> (f32, [__m256i; 4]) {
    let x = &x[..QK];
    let v = [
        _mm256_loadu_ps(x.as_ptr()),
        _mm256_loadu_ps(x[8..].as_ptr()),
        _mm256_loadu_ps(x[16..].as_ptr()),
        _mm256_loadu_ps(x[24..].as_ptr()),
    ];
    let sign = _mm256_set1_ps(-0.0);
    let m = _mm256_max_ps(
        _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
        _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])),
    );
    let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    let (d, id) = q8_scales(_mm_cvtss_f32(m));
    let id = _mm256_set1_ps(id);
    let quant = |v| {
        _mm256_cvtps_epi32(_mm256_round_ps::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(_mm256_mul_ps(v, id)))
    };
    (d, [quant(v[0]), quant(v[1]), quant(v[2]), quant(v[3])])
}

/// `d` as a little-endian f16, rounded to nearest even like `fp::f32_to_f16` (d is never
/// NaN for finite activations, the only case where the two could differ).
#[inline(always)]
unsafe fn f16_bytes(d: f32) -> [u8; 2] {
    let h = _mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set_ss(d));
    (_mm_extract_epi16::<0>(h) as u16).to_le_bytes()
}

/// The 32 quants as bytes, in order (the packs saturate, but |q| ≤ 127).
#[inline(always)]
unsafe fn pack(q: [__m256i; 4]) -> __m256i {
    // The packs work within 128-bit lanes: 0..4 8..12 16..20 24..28 | 4..8 12..16 ...
    let bytes = _mm256_packs_epi16(
        _mm256_packs_epi32(q[0], q[1]),
        _mm256_packs_epi32(q[2], q[3]),
    );
    _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_0_avx2(x: &[f32], out: &mut [u8]) {
    for (x, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, q) = q8_block(x);
        b[..2].copy_from_slice(&f16_bytes(d));
        _mm256_storeu_si256(b[2..34].as_mut_ptr().cast(), pack(q));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_1_avx2(x: &[f32], out: &mut [u8]) {
    for (x, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, q) = q8_block(x);
        b[..2].copy_from_slice(&f16_bytes(d));
        let sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let sum = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256::<1>(sum),
        );
        let sum = _mm_add_epi32(sum, _mm_unpackhi_epi64(sum, sum));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32::<0b01>(sum));
        b[2..4].copy_from_slice(&f16_bytes(d * _mm_cvtsi128_si32(sum) as f32));
        _mm256_storeu_si256(b[4..36].as_mut_ptr().cast(), pack(q));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_avx2(x: &[f32], out: &mut [u8]) {
    let mut xs = x.chunks_exact(8);
    let mut outs = out.chunks_exact_mut(16);
    for (x, o) in (&mut xs).zip(&mut outs) {
        let h = _mm256_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm256_loadu_ps(x.as_ptr()));
        _mm_storeu_si128(o.as_mut_ptr().cast(), h);
    }
    quantize::f16(xs.remainder(), outs.into_remainder());
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn bf16_avx2(x: &[f32], out: &mut [u8]) {
    let mut xs = x.chunks_exact(16);
    let mut outs = out.chunks_exact_mut(32);
    for (x, o) in (&mut xs).zip(&mut outs) {
        let lo = bf16_lanes(_mm256_loadu_si256(x.as_ptr().cast()));
        let hi = bf16_lanes(_mm256_loadu_si256(x[8..].as_ptr().cast()));
        // packus keeps 16-bit lanes (all ≤ 0xFFFF) in 128-bit halves: reorder the qwords.
        let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
        _mm256_storeu_si256(o.as_mut_ptr().cast(), packed);
    }
    quantize::bf16(xs.remainder(), outs.into_remainder());
}

/// Eight f32 bit patterns → their bf16 in the low half of each lane.
#[inline(always)]
unsafe fn bf16_lanes(u: __m256i) -> __m256i {
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(1));
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(
        u,
        _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb),
    ));
    let magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFF_FFFF));
    let nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F80_0000));
    let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(u), _mm256_set1_epi32(64));
    _mm256_blendv_epi8(rounded, quiet, nan)
}
