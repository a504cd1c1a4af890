//! The vectors of f32 lanes that attention's kernels are written in, one type per instruction
//! set: AVX-512 and AVX2 through their intrinsics, and `wide`'s portable eight lanes for
//! everything else.
//!
//! Every operation works lane by lane, never across lanes, so a lane's result does not depend
//! on what the other lanes hold: that is what lets attention put several query rows side by
//! side in one vector and still give each row the same numbers whoever its neighbours are.

use half::f16;
use half::slice::HalfFloatSliceExt;
use wide::{f32x8, CmpEq, CmpGe, CmpLt};

/// A vector of [`Lanes::N`] f32 lanes.
///
/// # Safety
///
/// The methods may use instructions of the type's instruction set: callers must have checked
/// that the CPU has it. Pointers must be valid for [`Lanes::N`] floats. All methods are
/// `#[inline(always)]` so that they compile into the caller's `#[target_feature]` function.
pub(super) trait Lanes: Copy {
    const N: usize;
    /// Whether the instruction set has 32 vector registers (rather than 16), which decides
    /// how many accumulators a kernel may keep.
    const MANY_REGISTERS: bool;
    /// One flag per lane.
    type Mask: Copy;

    unsafe fn splat(x: f32) -> Self;
    unsafe fn load(src: *const f32) -> Self;
    /// Lane `i` from `src[offsets[i]]`.
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self;
    unsafe fn store(self, dst: *mut f32);
    /// `self · b + c`, rounded once where the instruction set can.
    unsafe fn mul_add(self, b: Self, c: Self) -> Self;
    unsafe fn mul(self, b: Self) -> Self;
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn max(self, b: Self) -> Self;
    /// `e^self`; 0 for `−∞` and for arguments so negative that the result is below f32's
    /// normal range.
    unsafe fn exp(self) -> Self;
    /// Lanes where `start ≤ self < end`.
    unsafe fn in_range(self, start: Self, end: Self) -> Self::Mask;
    unsafe fn equal(self, b: Self) -> Self::Mask;
    /// `mask ? if_set : if_clear`, lane by lane.
    unsafe fn select(mask: Self::Mask, if_set: Self, if_clear: Self) -> Self;

    /// `dst ← src`, widened to f32.
    #[inline(always)]
    unsafe fn widen_f16(src: &[f16], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }

    /// `x ← f16(x)` for every x (to nearest, ties to even).
    #[inline(always)]
    unsafe fn round_to_f16(xs: &mut [f32]) {
        let mut halves = [f16::ZERO; 64];
        for chunk in xs.chunks_mut(64) {
            let halves = &mut halves[..chunk.len()];
            halves.convert_from_f32_slice(chunk);
            halves.convert_to_f32_slice(chunk);
        }
    }
}

/// `wide`'s eight lanes: two SSE or NEON registers.
#[derive(Clone, Copy)]
pub(super) struct Portable(f32x8);

impl Lanes for Portable {
    const N: usize = 8;
    const MANY_REGISTERS: bool = false;
    type Mask = f32x8;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Portable(f32x8::splat(x))
    }
    #[inline(always)]
    unsafe fn load(src: *const f32) -> Self {
        // SAFETY: the caller passes 8 readable floats; `[f32; 8]` needs only f32 alignment.
        Portable(f32x8::new(unsafe { *src.cast::<[f32; 8]>() }))
    }
    #[inline(always)]
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self {
        let mut lanes = [0.0; 8];
        for (i, lane) in lanes.iter_mut().enumerate() {
            // SAFETY: the caller passes 8 offsets of readable floats.
            *lane = unsafe { *src.offset(*offsets.add(i) as isize) };
        }
        Portable(f32x8::new(lanes))
    }
    #[inline(always)]
    unsafe fn store(self, dst: *mut f32) {
        // SAFETY: the caller passes room for 8 floats.
        unsafe { *dst.cast::<[f32; 8]>() = self.0.to_array() }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Portable(self.0.mul_add(b.0, c.0))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Portable(self.0 * b.0)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Portable(self.0 + b.0)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        Portable(self.0 - b.0)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        Portable(self.0.fast_max(b.0))
    }
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        // `wide` gives 0 for |x| ≥ 87.3 and for non-finite x.
        Portable(self.0.exp())
    }
    #[inline(always)]
    unsafe fn in_range(self, start: Self, end: Self) -> f32x8 {
        self.0.cmp_ge(start.0) & self.0.cmp_lt(end.0)
    }
    #[inline(always)]
    unsafe fn equal(self, b: Self) -> f32x8 {
        self.0.cmp_eq(b.0)
    }
    #[inline(always)]
    unsafe fn select(mask: f32x8, if_set: Self, if_clear: Self) -> Self {
        Portable(mask.blend(if_set.0, if_clear.0))
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx512::Avx512;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::Lanes;
    use half::f16;
    use std::arch::x86_64::*;

    /// One 512-bit register of sixteen lanes; needs AVX-512F (and F16C for the scalar ends
    /// of the f16 conversions).
    #[derive(Clone, Copy)]
    pub(in crate::attention) struct Avx512(__m512);

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
        /// The same range reduction and polynomial as `wide`'s `exp`; `scalef` applies the
        /// power of two, which also takes results below f32's range to 0 (through the
        /// subnormals) without a separate check.
        #[inline(always)]
        unsafe fn exp(self) -> Self {
            let x = _mm512_min_ps(
                _mm512_max_ps(self.0, _mm512_set1_ps(-104.0)),
                _mm512_set1_ps(88.7),
            );
            let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
            );
            let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
            let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
            let mut z = _mm512_set1_ps(1.0 / 5040.0);
            for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 1.0 / 2.0] {
                z = _mm512_fmadd_ps(z, r, _mm512_set1_ps(c));
            }
            let z = _mm512_fmadd_ps(z, _mm512_mul_ps(r, r), r);
            Avx512(_mm512_scalef_ps(_mm512_add_ps(z, _mm512_set1_ps(1.0)), n))
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
        unsafe fn select(mask: __mmask16, if_set: Self, if_clear: Self) -> Self {
            Avx512(_mm512_mask_blend_ps(mask, if_clear.0, if_set.0))
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
                    let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                        _mm512_loadu_ps(c.as_ptr()),
                    );
                    _mm512_storeu_ps(c.as_mut_ptr(), _mm512_cvtph_ps(h));
                }
            }
            for x in chunks.into_remainder() {
                *x = f16::from_f32(*x).to_f32();
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) use avx2::Avx2;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::Lanes;
    use half::f16;
    use std::arch::x86_64::*;

    /// One 256-bit register of eight lanes; needs AVX2, FMA and F16C.
    #[derive(Clone, Copy)]
    pub(in crate::attention) struct Avx2(__m256);

    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

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
        /// As [`super::Avx512`]'s, with the power of two built in the exponent bits, so the
        /// argument is clamped to where that is a normal number and results below are set to
        /// 0 explicitly.
        #[inline(always)]
        unsafe fn exp(self) -> Self {
            const LOWEST: f32 = -87.3;
            let x = _mm256_min_ps(
                _mm256_max_ps(self.0, _mm256_set1_ps(LOWEST)),
                _mm256_set1_ps(88.0),
            );
            let n = _mm256_round_ps::<NEAREST>(_mm256_mul_ps(
                x,
                _mm256_set1_ps(std::f32::consts::LOG2_E),
            ));
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x);
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
            let mut z = _mm256_set1_ps(1.0 / 5040.0);
            for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 1.0 / 2.0] {
                z = _mm256_fmadd_ps(z, r, _mm256_set1_ps(c));
            }
            let z = _mm256_fmadd_ps(z, _mm256_mul_ps(r, r), r);
            let z = _mm256_add_ps(z, _mm256_set1_ps(1.0));
            let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_cvtps_epi32(n),
                _mm256_set1_epi32(127),
            )));
            let below = _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, _mm256_set1_ps(LOWEST));
            Avx2(_mm256_blendv_ps(
                _mm256_mul_ps(z, pow2),
                _mm256_setzero_ps(),
                below,
            ))
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
        unsafe fn select(mask: __m256, if_set: Self, if_clear: Self) -> Self {
            Avx2(_mm256_blendv_ps(if_clear.0, if_set.0, mask))
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
                    let h =
                        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
                    _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
                }
            }
            for x in chunks.into_remainder() {
                *x = f16::from_f32(*x).to_f32();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe fn exps<V: Lanes>(xs: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; xs.len()];
        for (x, o) in xs.chunks_exact(V::N).zip(out.chunks_exact_mut(V::N)) {
            unsafe { V::load(x.as_ptr()).exp().store(o.as_mut_ptr()) };
        }
        out
    }

    fn check_exp(exps: &[f32], xs: &[f32]) {
        for (&x, &e) in xs.iter().zip(exps) {
            let want = f64::from(x).exp();
            if want < 1e-37 {
                assert!(e < 1e-37, "exp({x}) = {e}");
            } else {
                assert!(
                    ((f64::from(e) - want) / want).abs() < 3e-7,
                    "exp({x}) = {e}, want {want}"
                );
            }
        }
    }

    #[test]
    fn exp_is_accurate_and_zero_below_the_range() {
        let mut xs: Vec<f32> = (-2000..=100).map(|i| i as f32 * 0.0537).collect();
        xs.extend([
            0.0,
            -0.0,
            -87.0,
            -88.0,
            -103.0,
            -200.0,
            -1e30,
            f32::NEG_INFINITY,
        ]);
        xs.resize(xs.len().next_multiple_of(16), -1.0);
        let portable = unsafe { exps::<Portable>(&xs) };
        check_exp(&portable, &xs);
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let zero = xs.iter().position(|&x| x == 0.0).unwrap();
            if has!("avx512f") {
                let avx512 = unsafe { exps::<Avx512>(&xs) };
                check_exp(&avx512, &xs);
                assert_eq!(avx512[zero], 1.0);
            }
            if has!("avx2") && has!("fma") {
                let avx2 = unsafe { exps::<Avx2>(&xs) };
                check_exp(&avx2, &xs);
                assert_eq!(avx2[zero], 1.0);
            }
        }
    }
}
