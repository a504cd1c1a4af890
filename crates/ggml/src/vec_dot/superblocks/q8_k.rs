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

/// What ggml's `nearest_int` adds: 1.5·2²³, so that the sum's low 23 bits hold the rounded
/// integer plus 2²².
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const ROUNDING_BIAS: f32 = 12_582_912.0;

/// The AVX-512 quantizer (16 values per vector: one bsum group each).
#[cfg(target_arch = "x86_64")]
pub(super) fn quantize_avx512(x: &[f32], out: &mut [u8]) {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Avx512` and
    // `Isa::Avx512Vnni`, which `DotKernel` hands out only after `Isa::available()` found
    // AVX-512 F/BW/VL/DQ.
    unsafe { quantize_avx512_impl(x, out) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq")]
unsafe fn quantize_avx512_impl(x: &[f32], out: &mut [u8]) {
    use std::arch::x86_64::*;
    for (xb, b) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let mut v = [_mm512_setzero_ps(); 16];
        for (i, v) in v.iter_mut().enumerate() {
            *v = _mm512_loadu_ps(xb[16 * i..16 * i + 16].as_ptr());
        }
        // `max_ps(a, acc)` returns `acc` when `a` is NaN: NaNs are skipped, as by the
        // reference's `>` comparison.
        let mut amax = _mm512_setzero_ps();
        for &v in &v {
            amax = _mm512_max_ps(_mm512_abs_ps(v), amax);
        }
        let amax = _mm512_reduce_max_ps(amax);
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let mut max = amax;
        for (i, &v) in v.iter().enumerate() {
            let hits = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(v), _mm512_set1_ps(amax));
            if hits != 0 {
                max = xb[16 * i + hits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let (d, rest) = b.split_at_mut(QS);
        let (qs, bsums) = rest.split_at_mut(256);
        for (v, (q, sum)) in v
            .iter()
            .zip(qs.chunks_exact_mut(16).zip(bsums.chunks_exact_mut(2)))
        {
            let biased = _mm512_add_ps(
                _mm512_mul_ps(*v, _mm512_set1_ps(iscale)),
                _mm512_set1_ps(ROUNDING_BIAS),
            );
            let int = _mm512_sub_epi32(
                _mm512_and_si512(_mm512_castps_si512(biased), _mm512_set1_epi32(0x007f_ffff)),
                _mm512_set1_epi32(0x0040_0000),
            );
            // `vpmovdb` truncates to the low 8 bits, as the reference's `as i8`.
            let bytes = _mm512_cvtepi32_epi8(_mm512_min_epi32(int, _mm512_set1_epi32(127)));
            _mm_storeu_si128(q.as_mut_ptr().cast(), bytes);
            let s = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(bytes)) as i16;
            sum.copy_from_slice(&s.to_le_bytes());
        }
        d.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
