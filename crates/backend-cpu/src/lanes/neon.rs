//! Four lanes in one 128-bit NEON register. The f16 conversions are the trait's, through
//! `half` (NEON's own need the unstable `f16` type).

use std::arch::aarch64::*;

use super::Lanes;

/// One 128-bit register of four lanes; aarch64 has 32 of them.
#[derive(Clone, Copy)]
pub(crate) struct Neon(float32x4_t);

/// `2ᵏ` for whole `k` in f32's normal range, −126..=127: `k + 127` in the exponent bits.
#[inline(always)]
unsafe fn pow2(k: int32x4_t) -> float32x4_t {
    vreinterpretq_f32_s32(vshlq_n_s32::<23>(vaddq_s32(k, vdupq_n_s32(127))))
}

impl Lanes for Neon {
    const N: usize = 4;
    const MANY_REGISTERS: bool = true;
    type Mask = uint32x4_t;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Neon(vdupq_n_f32(x))
    }
    #[inline(always)]
    unsafe fn load(src: *const f32) -> Self {
        // SAFETY: the caller passes 4 readable floats.
        Neon(unsafe { vld1q_f32(src) })
    }
    #[inline(always)]
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self {
        // SAFETY: the caller passes 4 offsets of readable floats.
        let lanes: [f32; 4] =
            std::array::from_fn(|i| unsafe { *src.offset(*offsets.add(i) as isize) });
        // SAFETY: four floats on the stack.
        Neon(unsafe { vld1q_f32(lanes.as_ptr()) })
    }
    #[inline(always)]
    unsafe fn store(self, dst: *mut f32) {
        // SAFETY: the caller passes room for 4 floats.
        unsafe { vst1q_f32(dst, self.0) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Neon(vfmaq_f32(c.0, self.0, b.0))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Neon(vmulq_f32(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        Neon(vdivq_f32(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Neon(vaddq_f32(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        Neon(vsubq_f32(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        Neon(vmaxq_f32(self.0, b.0))
    }
    /// `fmax`/`fmin` give NaN when either operand is NaN.
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self) -> Self {
        Neon(vminq_f32(vmaxq_f32(self.0, lo.0), hi.0))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        Neon(vrndnq_f32(self.0))
    }
    /// `2ⁿ` in two halves, each a normal number over the whole range of `n`, so that a result
    /// beyond f32's normal range is rounded once, by the last product.
    #[inline(always)]
    unsafe fn times_pow2(self, n: Self) -> Self {
        let n = vcvtq_s32_f32(n.0);
        let half = vshrq_n_s32::<1>(n);
        let rest = vsubq_s32(n, half);
        Neon(vmulq_f32(vmulq_f32(self.0, pow2(half)), pow2(rest)))
    }
    #[inline(always)]
    unsafe fn in_range(self, start: Self, end: Self) -> uint32x4_t {
        vandq_u32(vcgeq_f32(self.0, start.0), vcltq_f32(self.0, end.0))
    }
    #[inline(always)]
    unsafe fn equal(self, b: Self) -> uint32x4_t {
        vceqq_f32(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn at_most(self, b: Self) -> uint32x4_t {
        vcleq_f32(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn select(mask: uint32x4_t, if_set: Self, if_clear: Self) -> Self {
        Neon(vbslq_f32(mask, if_set.0, if_clear.0))
    }
}
