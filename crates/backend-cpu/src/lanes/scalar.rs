//! Plain Rust lanes: the fallback for CPUs without a vector unit plumb has intrinsics for, and
//! the yardstick the other lane types are tested against.

use super::Lanes;

/// Four lanes as an array, every operation a loop over them (which the compiler may
/// vectorize for the target's baseline). Four, as SIMD128 has, with `mul_add` rounding twice
/// as SIMD128's does: the same sums in the same order, so that native plumb capped to its
/// scalar kernels (`PLUMB_CPU_ISA=scalar`) computes what the WebAssembly build computes; the
/// page's replies are held to its text (tools/test-web.mjs).
#[derive(Clone, Copy)]
pub(crate) struct Scalar([f32; 4]);

impl Scalar {
    #[inline(always)]
    fn map(self, f: impl Fn(f32) -> f32) -> Scalar {
        Scalar(self.0.map(f))
    }

    #[inline(always)]
    fn zip(self, b: Scalar, f: impl Fn(f32, f32) -> f32) -> Scalar {
        Scalar(std::array::from_fn(|i| f(self.0[i], b.0[i])))
    }

    #[inline(always)]
    fn test(self, b: Scalar, f: impl Fn(f32, f32) -> bool) -> [bool; 4] {
        std::array::from_fn(|i| f(self.0[i], b.0[i]))
    }
}

/// `2ᵏ` for whole `k` in f32's normal range, −126..=127.
#[inline(always)]
fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

impl Lanes for Scalar {
    const N: usize = 4;
    const MANY_REGISTERS: bool = false;
    type Mask = [bool; 4];

    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Scalar([x; 4])
    }
    #[inline(always)]
    unsafe fn load(src: *const f32) -> Self {
        // SAFETY: the caller passes 4 readable floats; `[f32; 4]` needs only f32 alignment.
        Scalar(unsafe { *src.cast::<[f32; 4]>() })
    }
    #[inline(always)]
    unsafe fn gather(src: *const f32, offsets: *const i32) -> Self {
        // SAFETY: the caller passes 4 offsets of readable floats.
        Scalar(std::array::from_fn(|i| unsafe {
            *src.offset(*offsets.add(i) as isize)
        }))
    }
    #[inline(always)]
    unsafe fn store(self, dst: *mut f32) {
        // SAFETY: the caller passes room for 4 floats.
        unsafe { *dst.cast::<[f32; 4]>() = self.0 }
    }
    /// Two roundings: a fused multiply-add is a library call where the target lacks FMA.
    #[inline(always)]
    unsafe fn mul_add(self, b: Self, c: Self) -> Self {
        Scalar(std::array::from_fn(|i| self.0[i] * b.0[i] + c.0[i]))
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        self.zip(b, |x, y| x * y)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        self.zip(b, |x, y| x / y)
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        self.zip(b, |x, y| x + y)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        self.zip(b, |x, y| x - y)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        self.zip(b, f32::max)
    }
    #[inline(always)]
    unsafe fn clamp(self, lo: Self, hi: Self) -> Self {
        Scalar(std::array::from_fn(|i| self.0[i].clamp(lo.0[i], hi.0[i])))
    }
    #[inline(always)]
    unsafe fn round(self) -> Self {
        self.map(f32::round_ties_even)
    }
    /// `2ⁿ` in two halves, each a normal number over the whole range of `n`.
    #[inline(always)]
    unsafe fn times_pow2(self, n: Self) -> Self {
        self.zip(n, |x, n| {
            let n = n as i32;
            x * pow2(n >> 1) * pow2(n - (n >> 1))
        })
    }
    #[inline(always)]
    unsafe fn in_range(self, start: Self, end: Self) -> [bool; 4] {
        std::array::from_fn(|i| start.0[i] <= self.0[i] && self.0[i] < end.0[i])
    }
    #[inline(always)]
    unsafe fn equal(self, b: Self) -> [bool; 4] {
        self.test(b, |x, y| x == y)
    }
    #[inline(always)]
    unsafe fn at_most(self, b: Self) -> [bool; 4] {
        self.test(b, |x, y| x <= y)
    }
    #[inline(always)]
    unsafe fn select(mask: [bool; 4], if_set: Self, if_clear: Self) -> Self {
        Scalar(std::array::from_fn(|i| {
            if mask[i] {
                if_set.0[i]
            } else {
                if_clear.0[i]
            }
        }))
    }
}
