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

/// The AVX2 quantizer (8 values per vector).
#[cfg(target_arch = "x86_64")]
pub(super) fn quantize_avx2(x: &[f32], out: &mut [u8]) {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Avx2`, which `DotKernel`
    // hands out only after `Isa::available()` found AVX2.
    unsafe { quantize_avx2_impl(x, out) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_avx2_impl(x: &[f32], out: &mut [u8]) {
    use std::arch::x86_64::*;
    let sign = _mm256_set1_ps(-0.0);
    for (xb, b) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let mut v = [_mm256_setzero_ps(); 32];
        for (i, v) in v.iter_mut().enumerate() {
            *v = _mm256_loadu_ps(xb[8 * i..8 * i + 8].as_ptr());
        }
        // NaNs are skipped as in the AVX-512 quantizer.
        let mut amax = _mm256_setzero_ps();
        for &v in &v {
            amax = _mm256_max_ps(_mm256_andnot_ps(sign, v), amax);
        }
        let m = _mm_max_ps(
            _mm256_castps256_ps128(amax),
            _mm256_extractf128_ps::<1>(amax),
        );
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let mut max = amax;
        for (i, &v) in v.iter().enumerate() {
            let hit = _mm256_cmp_ps::<_CMP_EQ_OQ>(_mm256_andnot_ps(sign, v), _mm256_set1_ps(amax));
            let hits = _mm256_movemask_ps(hit);
            if hits != 0 {
                max = xb[8 * i + hits.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        // The low 8 bits of each nearest_int(iscale·x).min(127), as an i32 in 0..=255.
        let mut low = [_mm256_setzero_si256(); 32];
        for (low, &v) in low.iter_mut().zip(&v) {
            let biased = _mm256_add_ps(
                _mm256_mul_ps(v, _mm256_set1_ps(iscale)),
                _mm256_set1_ps(ROUNDING_BIAS),
            );
            let int = _mm256_sub_epi32(
                _mm256_and_si256(_mm256_castps_si256(biased), _mm256_set1_epi32(0x007f_ffff)),
                _mm256_set1_epi32(0x0040_0000),
            );
            *low = _mm256_and_si256(
                _mm256_min_epi32(int, _mm256_set1_epi32(127)),
                _mm256_set1_epi32(0xff),
            );
        }
        let (d, rest) = b.split_at_mut(QS);
        let (qs, bsums) = rest.split_at_mut(256);
        for (l, (q, sums)) in low
            .chunks_exact(4)
            .zip(qs.chunks_exact_mut(32).zip(bsums.chunks_exact_mut(4)))
        {
            // Values are in 0..=255, so the saturating packs only narrow; the permutation
            // undoes their per-128-bit-lane interleaving.
            let bytes = _mm256_permutevar8x32_epi32(
                _mm256_packus_epi16(
                    _mm256_packus_epi32(l[0], l[1]),
                    _mm256_packus_epi32(l[2], l[3]),
                ),
                _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7),
            );
            _mm256_storeu_si256(q.as_mut_ptr().cast(), bytes);
            let groups = [
                _mm256_castsi256_si128(bytes),
                _mm256_extracti128_si256::<1>(bytes),
            ];
            for (group, sum) in groups.into_iter().zip(sums.chunks_exact_mut(2)) {
                let wide = _mm256_madd_epi16(_mm256_cvtepi8_epi16(group), _mm256_set1_epi16(1));
                let s = _mm_add_epi32(
                    _mm256_castsi256_si128(wide),
                    _mm256_extracti128_si256::<1>(wide),
                );
                let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
                let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
                sum.copy_from_slice(&(_mm_cvtsi128_si32(s) as i16).to_le_bytes());
            }
        }
        d.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}

/// The NEON quantizer (4 values per vector).
#[cfg(target_arch = "aarch64")]
pub(super) fn quantize_neon(x: &[f32], out: &mut [u8]) {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Neon` and `Isa::NeonDotprod`,
    // which `DotKernel` hands out only after `Isa::available()` found NEON.
    unsafe { quantize_neon_impl(x, out) }
}

#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn quantize_neon_impl(x: &[f32], out: &mut [u8]) {
    use std::arch::aarch64::*;
    for (xb, b) in x.chunks_exact(256).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let mut v = [vdupq_n_f32(0.0); 64];
        for (i, v) in v.iter_mut().enumerate() {
            *v = vld1q_f32(xb[4 * i..4 * i + 4].as_ptr());
        }
        // `fmaxnm` returns the number when the other operand is a quiet NaN: NaNs are
        // skipped, as by the reference's `>` comparison.
        let mut amax = vdupq_n_f32(0.0);
        for &v in &v {
            amax = vmaxnmq_f32(amax, vabsq_f32(v));
        }
        let amax = vmaxnmvq_f32(amax);
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let first = xb.iter().position(|v| v.abs() == amax);
        let max = xb[first.expect("the largest magnitude is one of the values")];
        let iscale = -127.0 / max;
        let (d, rest) = b.split_at_mut(QS);
        let (qs, bsums) = rest.split_at_mut(256);
        for (v, (q, sum)) in v
            .chunks_exact(4)
            .zip(qs.chunks_exact_mut(16).zip(bsums.chunks_exact_mut(2)))
        {
            let mut int = [vdupq_n_s32(0); 4];
            for (int, &v) in int.iter_mut().zip(v) {
                let biased = vaddq_f32(
                    vmulq_f32(v, vdupq_n_f32(iscale)),
                    vdupq_n_f32(ROUNDING_BIAS),
                );
                let bits = vandq_s32(vreinterpretq_s32_f32(biased), vdupq_n_s32(0x007f_ffff));
                *int = vminq_s32(vsubq_s32(bits, vdupq_n_s32(0x0040_0000)), vdupq_n_s32(127));
            }
            // `xtn` keeps the low half of each lane: truncation, as the reference's `as i8`.
            let bytes = vcombine_s8(
                vmovn_s16(vcombine_s16(vmovn_s32(int[0]), vmovn_s32(int[1]))),
                vmovn_s16(vcombine_s16(vmovn_s32(int[2]), vmovn_s32(int[3]))),
            );
            vst1q_s8(q.as_mut_ptr().cast(), bytes);
            sum.copy_from_slice(&vaddlvq_s8(bytes).to_le_bytes());
        }
        d.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
