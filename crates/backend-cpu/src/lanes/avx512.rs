//! Sixteen lanes in one 512-bit register.

use std::arch::x86_64::*;

use half::f16;

use super::Lanes;

/// One 512-bit register of sixteen lanes; needs AVX-512F and VL (and F16C for the scalar ends
/// of the f16 conversions).
#[derive(Clone, Copy)]
pub(crate) struct Avx512(__m512);

const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

impl Lanes for Avx512 {
    const N: usize = 16;
    const MANY_REGISTERS: bool = true;
    type Mask = __mmask16;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Avx512(_mm512_set1_ps(x))
    }
    #[inline(always)]
    unsafe fn load(src: *const f32) -> Self {
        // SAFETY: the caller passes 16 readable floats.
        Avx512(unsafe { _mm512_loadu_ps(src) })
    }
    #[inline(always)]
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self {
        // SAFETY: the caller passes 16 offsets of readable floats.
        Avx512(unsafe { _mm512_i32gather_ps::<4>(_mm512_loadu_si512(offsets.cast()), src) })
    }
    #[inline(always)]
    unsafe fn store(self, dst: *mut f32) {
        // SAFETY: the caller passes room for 16 floats.
        unsafe { _mm512_storeu_ps(dst, self.0) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Avx512(_mm512_fmadd_ps(self.0, b.0, c.0))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Avx512(_mm512_mul_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        Avx512(_mm512_div_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Avx512(_mm512_add_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        Avx512(_mm512_sub_ps(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        Avx512(_mm512_max_ps(self.0, b.0))
    }
    /// `vmaxps`/`vminps` return their second operand when either is NaN: `self` goes second.
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self) -> Self {
        Avx512(_mm512_min_ps(hi.0, _mm512_max_ps(lo.0, self.0)))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        Avx512(_mm512_roundscale_ps::<NEAREST>(self.0))
    }
    /// `vscalefps` is that product, with its rounding, in one instruction.
    #[inline(always)]
    unsafe fn times_pow2(self, n: Self) -> Self {
        Avx512(_mm512_scalef_ps(self.0, n.0))
    }
    #[inline(always)]
    unsafe fn in_range(self, start: Self, end: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.0, start.0)
            & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, end.0)
    }
    #[inline(always)]
    unsafe fn equal(self, b: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn at_most(self, b: Self) -> __mmask16 {
        _mm512_cmp_ps_mask::<_CMP_LE_OQ>(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn select(mask: __mmask16, if_set: Self, if_clear: Self) -> Self {
        Avx512(_mm512_mask_blend_ps(mask, if_clear.0, if_set.0))
    }

    #[inline(always)]
    unsafe fn f16_bits(self, dst: *mut i32) {
        let halves = _mm512_cvtps_ph::<NEAREST>(self.0);
        // SAFETY: the caller passes room for 16 indices.
        unsafe { _mm512_storeu_si512(dst.cast(), _mm512_cvtepu16_epi32(halves)) }
    }

    #[inline(always)]
    unsafe fn widen_f16(src: &[f16], dst: &mut [f32]) {
        assert_eq!(src.len(), dst.len());
        let mut s = src.chunks_exact(16);
        let mut d = dst.chunks_exact_mut(16);
        for (s, d) in (&mut s).zip(&mut d) {
            // SAFETY: 16 halves (32 bytes) in, 16 floats out.
            unsafe {
                let h = _mm256_loadu_si256(s.as_ptr().cast());
                _mm512_storeu_ps(d.as_mut_ptr(), _mm512_cvtph_ps(h));
            }
        }
        for (s, d) in s.remainder().iter().zip(d.into_remainder()) {
            *d = s.to_f32();
        }
    }

    #[inline(always)]
    unsafe fn round_to_f16(xs: &mut [f32]) {
        let mut chunks = xs.chunks_exact_mut(16);
        for c in &mut chunks {
            // SAFETY: 16 floats, read and written in place.
            unsafe {
                let h = _mm512_cvtps_ph::<NEAREST>(_mm512_loadu_ps(c.as_ptr()));
                _mm512_storeu_ps(c.as_mut_ptr(), _mm512_cvtph_ps(h));
            }
        }
        for x in chunks.into_remainder() {
            *x = f16::from_f32(*x).to_f32();
        }
    }
}
