//! Vectors of f32 lanes, one type per instruction set, that the backend's f32 kernels
//! (attention, RMSNorm, the gated activations) are written in once: AVX-512 and AVX2+FMA
//! through their intrinsics on x86-64, NEON on aarch64, and plain Rust lanes everywhere else.
//! Which one runs follows [`plumb_ggml::Isa`], the detection ggml's dot products use too. A
//! kernel is compiled for a lane type inside a `#[target_feature]` function of its instruction
//! set, so that the `#[inline(always)]` lane operations become single instructions there.
//!
//! Every operation works lane by lane, never across lanes, so a lane's result does not depend
//! on what the other lanes hold: that is what lets attention put several query rows side by
//! side in one vector and still give each row the same numbers whoever its neighbours are.

use half::f16;
use half::slice::HalfFloatSliceExt;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::Avx512;
#[cfg(target_arch = "aarch64")]
pub(crate) use neon::Neon;
pub(crate) use scalar::Scalar;

/// The most lanes of any implementation: buffers of this many floats hold a vector of any.
pub(crate) const MAX_LANES: usize = 16;

/// A vector of [`Lanes::N`] f32 lanes.
///
/// # Safety
///
/// The methods may use instructions of the type's instruction set: callers must have checked
/// that the CPU has it. Pointers must be valid for [`Lanes::N`] elements. All methods are
/// `#[inline(always)]` so that they compile into the caller's `#[target_feature]` function.
pub(crate) trait Lanes: Copy {
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
    unsafe fn div(self, b: Self) -> Self;
    unsafe fn add(self, b: Self) -> Self;
    unsafe fn sub(self, b: Self) -> Self;
    unsafe fn max(self, b: Self) -> Self;
    /// `self` limited to `lo..=hi`; NaN stays NaN.
    unsafe fn clamp(self, lo: Self, hi: Self) -> Self;
    /// To the nearest whole number, ties to even.
    unsafe fn round(self) -> Self;
    /// `self · 2ⁿ` for whole numbers `n` in −150..=128, rounded as the product would be:
    /// overflowing to ∞ and underflowing through the subnormals to 0.
    unsafe fn times_pow2(self, n: Self) -> Self;
    /// Lanes where `start ≤ self < end`.
    unsafe fn in_range(self, start: Self, end: Self) -> Self::Mask;
    unsafe fn equal(self, b: Self) -> Self::Mask;
    /// Lanes where `self ≤ b`.
    unsafe fn at_most(self, b: Self) -> Self::Mask;
    /// `mask ? if_set : if_clear`, lane by lane.
    unsafe fn select(mask: Self::Mask, if_set: Self, if_clear: Self) -> Self;

    /// `e^self` within 3·10⁻⁷ relative: ∞ above f32's range (`self` > 88.72), through the
    /// subnormals to 0 below it (0 from −104 down, and for −∞); NaN stays NaN.
    ///
    /// `self = n·ln 2 + r` with `n` whole and `|r| ≤ ln 2 / 2`, `ln 2` split in two so that
    /// `n·ln 2` is exact enough (Cody and Waite's reduction, as Cephes' `expf`); `e^r` from its
    /// Taylor series to `r⁷/7!`, which is below f32's precision there; then scaled by `2ⁿ`.
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        // Beyond these bounds e^x is 0 or ∞ in f32; they keep `n` in `times_pow2`'s range.
        let x = self.clamp(Self::splat(-104.0), Self::splat(89.0));
        let n = x.mul(Self::splat(std::f32::consts::LOG2_E)).round();
        let r = n.mul_add(Self::splat(-0.693_359_4), x);
        let r = n.mul_add(Self::splat(2.121_944_4e-4), r);
        let mut p = Self::splat(1.0 / 5040.0);
        for c in [1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 1.0 / 2.0] {
            p = p.mul_add(r, Self::splat(c));
        }
        let e_r = p.mul_add(r.mul(r), r).add(Self::splat(1.0));
        e_r.times_pow2(n)
    }

    /// Each lane rounded to f16 (to nearest, ties to even), its 16 bits zero-extended: the
    /// index of its entry in a table over all f16 values.
    #[inline(always)]
    unsafe fn f16_bits(self, dst: *mut i32) {
        let mut lanes = [0.0; MAX_LANES];
        self.store(lanes.as_mut_ptr());
        for (i, x) in lanes[..Self::N].iter().enumerate() {
            // SAFETY: the caller passes room for N indices.
            unsafe { *dst.add(i) = i32::from(f16::from_f32(*x).to_bits()) };
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_ggml::Isa;

    /// `f` with the name and `exp` of each lane type this machine can run.
    fn for_each_lane_type(mut f: impl FnMut(&str, fn(&[f32]) -> Vec<f32>)) {
        for isa in Isa::available() {
            match isa {
                Isa::Scalar => f("scalar", exps::<Scalar>),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => f("avx512", exps_avx512),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => f("avx2", exps_avx2),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => f("neon", exps_neon),
                // The same lanes as an instruction set before them.
                _ => {}
            }
        }
    }

    fn exps<V: Lanes>(xs: &[f32]) -> Vec<f32> {
        assert!(xs.len().is_multiple_of(V::N));
        let mut out = vec![0.0; xs.len()];
        for (x, o) in xs.chunks_exact(V::N).zip(out.chunks_exact_mut(V::N)) {
            // SAFETY: whole vectors in and out; the callers check the instruction set.
            unsafe { V::load(x.as_ptr()).exp().store(o.as_mut_ptr()) };
        }
        out
    }

    #[cfg(target_arch = "x86_64")]
    fn exps_avx512(xs: &[f32]) -> Vec<f32> {
        #[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
        unsafe fn run(xs: &[f32]) -> Vec<f32> {
            exps::<Avx512>(xs)
        }
        // SAFETY: only called where `Isa::available()` lists AVX-512.
        unsafe { run(xs) }
    }

    #[cfg(target_arch = "x86_64")]
    fn exps_avx2(xs: &[f32]) -> Vec<f32> {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn run(xs: &[f32]) -> Vec<f32> {
            exps::<Avx2>(xs)
        }
        // SAFETY: only called where `Isa::available()` lists AVX2.
        unsafe { run(xs) }
    }

    #[cfg(target_arch = "aarch64")]
    fn exps_neon(xs: &[f32]) -> Vec<f32> {
        #[target_feature(enable = "neon")]
        unsafe fn run(xs: &[f32]) -> Vec<f32> {
            exps::<Neon>(xs)
        }
        // SAFETY: only called where `Isa::available()` lists NEON.
        unsafe { run(xs) }
    }

    #[test]
    fn exp_is_accurate_over_f32s_range_and_saturates_beyond_it() {
        let mut xs: Vec<f32> = (-2000..=1700).map(|i| i as f32 * 0.0537).collect();
        let edges = [
            0.0,
            -0.0,
            1e-30,
            -1e-30,
            88.0,
            -88.0,
            88.72,
            88.73,
            -87.3,
            -87.4,
            -103.0,
            -103.9,
            -104.0,
            -104.5,
            1e4,
            -1e4,
            1e30,
            -1e30,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        xs.extend(edges);
        xs.resize(xs.len().next_multiple_of(MAX_LANES), 1.0);
        for_each_lane_type(|name, exps| {
            let got = exps(&xs);
            for (&x, &e) in xs.iter().zip(&got) {
                let want = f64::from(x).exp();
                if x.is_nan() {
                    assert!(e.is_nan(), "{name}: exp({x}) = {e}");
                } else if want > f64::from(f32::MAX) {
                    assert_eq!(e, f32::INFINITY, "{name}: exp({x})");
                } else if want < f64::from(f32::MIN_POSITIVE) {
                    // Subnormal results carry fewer bits; they only need to be that small.
                    assert!(
                        (0.0..f32::MIN_POSITIVE).contains(&e),
                        "{name}: exp({x}) = {e}"
                    );
                    if x <= -104.0 {
                        assert_eq!(e, 0.0, "{name}: exp({x})");
                    }
                } else {
                    let err = ((f64::from(e) - want) / want).abs();
                    assert!(err < 3e-7, "{name}: exp({x}) = {e}, want {want}");
                }
            }
            let at = |x: f32| got[xs.iter().position(|&y| y == x).unwrap()];
            assert_eq!(at(0.0), 1.0, "{name}");
        });
    }
}
