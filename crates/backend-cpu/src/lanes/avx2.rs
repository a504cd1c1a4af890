//! Eight lanes in one 256-bit register.

use std::arch::x86_64::*;

use half::f16;

use super::Lanes;

/// One 256-bit register of eight lanes; needs AVX2, FMA and F16C.
#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256);

const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// `2ᵏ` for whole `k` in f32's normal range, −126..=127: `k + 127` in the exponent bits.
#[inline(always)]
unsafe fn pow2(k: __m256i) -> __m256 {
    _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        k,
        _mm256_set1_epi32(127),
    )))
}

impl Lanes for Avx2 {
    const N: usize = 8;
    const MANY_REGISTERS: bool = false;
    type Mask = __m256;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Avx2(_mm256_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn load(src: *const f32) -> Self {
        // SAFETY: the caller passes 8 readable floats.
        Avx2(unsafe { _mm256_loadu_ps(src) })
    }
    #[inline(always)]
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self {
        // SAFETY: the caller passes 8 offsets of readable floats.
        Avx2(unsafe { _mm256_i32gather_ps::<4>(src, _mm256_loadu_si256(offsets.cast())) })
    }
    #[inline(always)]
    unsafe fn store(self, dst: *mut f32) {
        // SAFETY: the caller passes room for 8 floats.
        unsafe { _mm256_storeu_ps(dst, self.0) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Avx2(_mm256_fmadd_ps(self.0, b.0, c.0))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Avx2(_mm256_mul_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        Avx2(_mm256_div_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Avx2(_mm256_add_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        Avx2(_mm256_sub_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        Avx2(_mm256_max_ps(self.0, b.0))
    }
    /// `vmaxps`/`vminps` return their second operand when either is NaN: `self` goes second.
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self) -> Self {
        Avx2(_mm256_min_ps(hi.0, _mm256_max_ps(lo.0, self.0)))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        Avx2(_mm256_round_ps::<NEAREST>(self.0))
    }
    /// `2ⁿ` in two halves, each a normal number over the whole range of `n`, so that a result
    /// beyond f32's normal range is rounded once, by the last product.
    #[inline(always)]
    unsafe fn times_pow2(self, n: Self) -> Self {
        let n = _mm256_cvtps_epi32(n.0);
        let half = _mm256_srai_epi32::<1>(n);
        let rest = _mm256_sub_epi32(n, half);
        Avx2(_mm256_mul_ps(_mm256_mul_ps(self.0, pow2(half)), pow2(rest)))
    }
    #[inline(always)]
    unsafe fn in_range(self, start: Self, end: Self) -> __m256 {
        _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(self.0, start.0),
            _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, end.0),
        )
    }
    #[inline(always)]
    unsafe fn equal(self, b: Self) -> __m256 {
        _mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn at_most(self, b: Self) -> __m256 {
        _mm256_cmp_ps::<_CMP_LE_OQ>(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn select(mask: __m256, if_set: Self, if_clear: Self) -> Self {
        Avx2(_mm256_blendv_ps(if_clear.0, if_set.0, mask))
    }

    #[inline(always)]
    unsafe fn f16_bits(self, dst: *mut i32) {
        let halves = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0);
        // SAFETY: the caller passes room for 8 indices.
        unsafe { _mm256_storeu_si256(dst.cast(), _mm256_cvtepu16_epi32(halves)) }
    }

    #[inline(always)]
    unsafe fn widen_f16(src: &[f16], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len());
        let mut s = src.chunks_exact(8);
        let mut d = dst.chunks_exact_mut(8);
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: 8 halves (16 bytes) in, 8 floats out.
            unsafe {
                let h = _mm_loadu_si128(s.as_ptr().cast());
                _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for (s, d) in s.remainder().iter().zip(d.into_remainder()) {
            *d = s.to_f32();
        }
    }

    #[inline(always)]
    unsafe fn round_to_f16(xs: &mut [f32]) {
        let mut chunks = xs.chunks_exact_mut(8);
        for c in &mut chunks {
            // SAFETY: 8 floats, read and written in place.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
                _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
            }
        }
        for x in chunks.into_remainder() {
            *x = f16::from_f32(*x).to_f32();
        }
    }
}
