//! Four lanes in one 128-bit WebAssembly SIMD register. SIMD128 has no fused multiply-add
//! (relaxed SIMD's is not deterministic across engines), so `mul_add` rounds twice, as the
//! scalar lanes do. The f16 conversions are the trait's, through `half`.

use core::arch::wasm32::*;

use super::Lanes;

/// One 128-bit register of four lanes. WebAssembly has no register file: the engine maps
/// values to the CPU's 16 or 32 vector registers.
#[derive(Clone, Copy)]
pub(crate) struct Simd128(v128);

/// `2ᵏ` for whole `k` in f32's normal range, −126..=127: `k + 127` in the exponent bits.
#[inline(always)]
fn pow2(k: v128) -> v128 {
    i32x4_shl(i32x4_add(k, i32x4_splat(127)), 23)
}

impl Lanes for Simd128 {
    const N: usize = 4;
    const MANY_REGISTERS: bool = false;
    type Mask = v128;

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Simd128(f32x4_splat(x))
    }
    #[inline(always)]
    unsafe fn load(src: *const f32) -> Self {
        // SAFETY: the caller passes 4 readable floats; wasm loads need no alignment.
        Simd128(unsafe { v128_load(src.cast()) })
    }
    #[inline(always)]
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self {
        // SAFETY: the caller passes 4 offsets of readable floats.
        let lane = |i: usize| unsafe { *src.offset(*offsets.add(i) as isize) };
        Simd128(f32x4(lane(0), lane(1), lane(2), lane(3)))
    }
    #[inline(always)]
    unsafe fn store(self, dst: *mut f32) {
        // SAFETY: the caller passes room for 4 floats.
        unsafe { v128_store(dst.cast(), self.0) }
    }
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Simd128(f32x4_add(f32x4_mul(self.0, b.0), c.0))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        Simd128(f32x4_mul(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        Simd128(f32x4_div(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        Simd128(f32x4_add(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        Simd128(f32x4_sub(self.0, b.0))
    }
    /// `f32x4.max` gives NaN when either operand is NaN.
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        Simd128(f32x4_max(self.0, b.0))
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self) -> Self {
        Simd128(f32x4_min(f32x4_max(self.0, lo.0), hi.0))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        Simd128(f32x4_nearest(self.0))
    }
    /// `2ⁿ` in two halves, each a normal number over the whole range of `n`, so that a result
    /// beyond f32's normal range is rounded once, by the last product.
    #[inline(always)]
    unsafe fn times_pow2(self, n: Self) -> Self {
        let n = i32x4_trunc_sat_f32x4(n.0);
        let half = i32x4_shr(n, 1);
        let rest = i32x4_sub(n, half);
        Simd128(f32x4_mul(f32x4_mul(self.0, pow2(half)), pow2(rest)))
    }
    #[inline(always)]
    unsafe fn in_range(self, start: Self, end: Self) -> v128 {
        v128_and(f32x4_ge(self.0, start.0), f32x4_lt(self.0, end.0))
    }
    #[inline(always)]
    unsafe fn equal(self, b: Self) -> v128 {
        f32x4_eq(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn at_most(self, b: Self) -> v128 {
        f32x4_le(self.0, b.0)
    }
    #[inline(always)]
    unsafe fn select(mask: v128, if_set: Self, if_clear: Self) -> Self {
        Simd128(v128_bitselect(if_set.0, if_clear.0, mask))
    }
}
