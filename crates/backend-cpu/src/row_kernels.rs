//! The f32 kernels of the per-row ops: RMSNorm and the gated activations (SiLU and GELU,
//! times `up`). Each is written once over [`Lanes`] and compiled for every instruction set in
//! a `#[target_feature]` function; [`RowKernels`] holds the ones of one [`Isa`], chosen once,
//! as ggml's [`plumb_ggml::DotKernel`]s are.

use std::sync::OnceLock;

use half::f16;
use plumb_ggml::Isa;

#[cfg(target_arch = "aarch64")]
use crate::lanes::Neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use crate::lanes::Simd128;
#[cfg(target_arch = "x86_64")]
use crate::lanes::{Avx2, Avx512};
use crate::lanes::{Lanes, Scalar, MAX_LANES};

/// Entries of a table over every f16 bit pattern.
const F16_VALUES: usize = 1 << 16;

/// GELU (tanh approximation) of every f16 value, rounded to f16: ggml's `ggml_table_gelu_f16`.
type GeluTable = [f32; F16_VALUES];

/// The row kernels of one instruction set.
#[derive(Clone, Copy)]
pub struct RowKernels {
    isa: Isa,
    fns: Fns,
}

/// The kernels as safe function pointers. They are safe to call because [`RowKernels`] only
/// holds those of an instruction set this machine has; every length has been checked.
#[derive(Clone, Copy)]
struct Fns {
    rms_norm: fn(&mut [f32], &[f32], f32),
    swiglu: fn(&mut [f32], &[f32]),
    geglu: fn(&mut [f32], &[f32], &GeluTable),
}

/// [`Fns`] of the generic kernels compiled for `$lanes` inside functions with `$features`.
/// Only for lanes of an instruction set this machine has: the caller checks.
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    all(target_arch = "wasm32", target_feature = "simd128")
))]
macro_rules! fns_for {
    ($lanes:ty, $features:literal) => {{
        #[target_feature(enable = $features)]
        unsafe fn rms_norm_for(x: &mut [f32], weight: &[f32], eps: f32) {
            rms_norm::<$lanes>(x, weight, eps)
        }
        #[target_feature(enable = $features)]
        unsafe fn swiglu_for(gate: &mut [f32], up: &[f32]) {
            map_pairs::<$lanes>(&SiluTimes, gate, up)
        }
        #[target_feature(enable = $features)]
        unsafe fn geglu_for(gate: &mut [f32], up: &[f32], table: &GeluTable) {
            map_pairs::<$lanes>(&GeluTimes(table), gate, up)
        }
        // SAFETY (all three): `RowKernels::for_isa` checked that this machine has the
        // instruction set.
        Fns {
            rms_norm: |x, weight, eps| unsafe { rms_norm_for(x, weight, eps) },
            swiglu: |gate, up| unsafe { swiglu_for(gate, up) },
            geglu: |gate, up, table| unsafe { geglu_for(gate, up, table) },
        }
    }};
}

impl RowKernels {
    /// The kernels of `isa`, if this machine can run it. Tests use this to compare
    /// instruction sets.
    pub fn for_isa(isa: Isa) -> Option<RowKernels> {
        if !Isa::available().contains(&isa) {
            return None;
        }
        let fns = match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx512Vnni => {
                fns_for!(Avx512, "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx2Vnni => fns_for!(Avx2, "avx2,fma,f16c"),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => fns_for!(Neon, "neon"),
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Isa::Simd128 => fns_for!(Simd128, "simd128"),
            // SAFETY (all three): the scalar lanes are plain Rust.
            _ => Fns {
                rms_norm: |x, weight, eps| unsafe { rms_norm::<Scalar>(x, weight, eps) },
                swiglu: |gate, up| unsafe { map_pairs::<Scalar>(&SiluTimes, gate, up) },
                geglu: |gate, up, table| unsafe {
                    map_pairs::<Scalar>(&GeluTimes(table), gate, up)
                },
            },
        };
        Some(RowKernels { isa, fns })
    }

    /// The kernels of the best instruction set this machine has.
    pub fn detect() -> RowKernels {
        RowKernels::for_isa(Isa::detect()).expect("the detected instruction set is available")
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// `x ← x / rms(x) · weight`, where `rms(x) = √(mean(x²) + eps)`.
    pub fn rms_norm(&self, x: &mut [f32], weight: &[f32], eps: f32) {
        assert_eq!(x.len(), weight.len(), "rms_norm: a group and its weight");
        (self.fns.rms_norm)(x, weight, eps)
    }

    /// `gate ← silu(gate) · up`, with `silu(x) = x / (1 + e^−x)`.
    pub fn swiglu(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "swiglu: gate and up");
        (self.fns.swiglu)(gate, up)
    }

    /// `gate ← gelu(gate) · up` as ggml's CPU backend computes it: GELU read from a table
    /// indexed by the f16 rounding of the gate (and itself rounded to f16), 0 at −10 and
    /// below, the identity from 10 up. This is llama.cpp's own rounding; matching it keeps
    /// gemma's logits within llama.cpp's margins where the exact GELU drifts.
    pub fn geglu(&self, gate: &mut [f32], up: &[f32]) {
        assert_eq!(gate.len(), up.len(), "geglu: gate and up");
        (self.fns.geglu)(gate, up, gelu_f16_table())
    }
}

fn gelu_f16_table() -> &'static GeluTable {
    static TABLE: OnceLock<Box<GeluTable>> = OnceLock::new();
    TABLE.get_or_init(|| {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        let table: Box<[f32]> = (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                let gelu = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh());
                f16::from_f32(gelu).to_f32()
            })
            .collect();
        table.try_into().expect("one entry per f16 value")
    })
}

/// # Safety
///
/// The CPU must have `V`'s instruction set.
#[inline(always)]
unsafe fn rms_norm<V: Lanes>(x: &mut [f32], weight: &[f32], eps: f32) {
    let mean = sum_of_squares::<V>(x) / x.len() as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    map_pairs::<V>(&Scaled(scale), x, weight)
}

/// `Σ x²`, in one vector of running sums (the last vector padded with zeros) that are then
/// added lane by lane.
#[inline(always)]
unsafe fn sum_of_squares<V: Lanes>(x: &[f32]) -> f32 {
    let mut sums = V::splat(0.0);
    let mut chunks = x.chunks_exact(V::N);
    for c in &mut chunks {
        let v = V::load(c.as_ptr());
        sums = v.mul_add(v, sums);
    }
    let mut tail = [0.0; MAX_LANES];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    let v = V::load(tail.as_ptr());
    sums = v.mul_add(v, sums);
    let mut lanes = [0.0; MAX_LANES];
    sums.store(lanes.as_mut_ptr());
    lanes[..V::N].iter().sum()
}

/// An operation on a vector of `x` and the matching vector of `y`, giving the new `x`.
trait PairOp {
    /// # Safety
    ///
    /// The CPU must have `V`'s instruction set.
    unsafe fn apply<V: Lanes>(&self, x: V, y: V) -> V;
}

/// `x ← op(x, y)` for `x` and `y` of the same length, a vector at a time; the last, partial
/// vector goes through zero-padded copies, so that every element gets the same arithmetic.
#[inline(always)]
unsafe fn map_pairs<V: Lanes>(op: &impl PairOp, x: &mut [f32], y: &[f32]) {
    let mut xs = x.chunks_exact_mut(V::N);
    let mut ys = y.chunks_exact(V::N);
    for (x, y) in (&mut xs).zip(&mut ys) {
        op.apply(V::load(x.as_ptr()), V::load(y.as_ptr()))
            .store(x.as_mut_ptr());
    }
    let (x, y) = (xs.into_remainder(), ys.remainder());
    if !x.is_empty() {
        let (mut x_pad, mut y_pad) = ([0.0; MAX_LANES], [0.0; MAX_LANES]);
        x_pad[..x.len()].copy_from_slice(x);
        y_pad[..y.len()].copy_from_slice(y);
        op.apply(V::load(x_pad.as_ptr()), V::load(y_pad.as_ptr()))
            .store(x_pad.as_mut_ptr());
        x.copy_from_slice(&x_pad[..x.len()]);
    }
}

/// `x · scale · y`, in that order.
struct Scaled(f32);

impl PairOp for Scaled {
    #[inline(always)]
    unsafe fn apply<V: Lanes>(&self, x: V, y: V) -> V {
        x.mul(V::splat(self.0)).mul(y)
    }
}

/// `silu(x) · y`.
struct SiluTimes;

impl PairOp for SiluTimes {
    #[inline(always)]
    unsafe fn apply<V: Lanes>(&self, x: V, y: V) -> V {
        let one = V::splat(1.0);
        let silu = x.div(one.add(V::splat(0.0).sub(x).exp()));
        silu.mul(y)
    }
}

/// `gelu(x) · y` through the table (see [`RowKernels::geglu`]).
struct GeluTimes<'t>(&'t GeluTable);

impl PairOp for GeluTimes<'_> {
    #[inline(always)]
    unsafe fn apply<V: Lanes>(&self, x: V, y: V) -> V {
        let mut index = [0; MAX_LANES];
        x.f16_bits(index.as_mut_ptr());
        // SAFETY: f16 bit patterns index the table of all of them.
        let gelu = V::gather(self.0.as_ptr(), index.as_ptr());
        let ten = V::splat(10.0);
        let out = V::select(ten.at_most(x), x.mul(y), gelu.mul(y));
        V::select(x.at_most(V::splat(-10.0)), V::splat(0.0), out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silu(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    fn gelu_tanh(x: f64) -> f64 {
        0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
    }

    /// Every instruction set this machine has, the scalar one first.
    fn all_kernels() -> Vec<RowKernels> {
        let kernels: Vec<RowKernels> = Isa::available()
            .into_iter()
            .map(|isa| RowKernels::for_isa(isa).unwrap())
            .collect();
        assert_eq!(kernels[0].isa(), Isa::Scalar);
        kernels
    }

    /// Gates over [−20, 20] and the extremes, in a row whose length leaves a partial vector.
    fn gates() -> Vec<f32> {
        (-400..=400)
            .map(|i| i as f32 * 0.05)
            .chain([
                -100.0,
                100.0,
                0.0,
                -0.0,
                88.0,
                -88.0,
                89.0,
                -89.0,
                1e4,
                -1e4,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
            ])
            .collect()
    }

    #[test]
    fn activations_match_their_definitions_on_every_instruction_set() {
        let xs = gates();
        assert!(!xs.len().is_multiple_of(MAX_LANES));
        let ones = vec![1.0; xs.len()];
        for kernels in all_kernels() {
            let name = kernels.isa().name();
            let mut silu_out = xs.clone();
            kernels.swiglu(&mut silu_out, &ones);
            let mut gelu_out = xs.clone();
            kernels.geglu(&mut gelu_out, &ones);
            for (i, &x) in xs.iter().enumerate() {
                let x64 = f64::from(x);
                let want = silu(x64);
                let got = f64::from(silu_out[i]);
                if want.is_nan() {
                    assert!(got.is_nan(), "{name}: silu({x}) = {got}");
                } else if want.is_infinite() {
                    assert_eq!(got, want, "{name}: silu({x})");
                } else {
                    let err = (got - want).abs();
                    assert!(
                        err <= 1e-6 * want.abs().max(1.0),
                        "{name}: silu({x}) = {got}, want {want}"
                    );
                }
                // GELU goes through f16, as in ggml: its input and output are rounded to 11
                // significant bits, and it is cut off at ±10.
                let got = f64::from(gelu_out[i]);
                if x.is_nan() {
                    assert!(got.is_nan(), "{name}: gelu({x}) = {got}");
                } else if x.abs() >= 10.0 {
                    let want = if x >= 10.0 { x64 } else { 0.0 };
                    assert_eq!(got, want, "{name}: gelu({x})");
                } else {
                    let (want, step) = (gelu_tanh(x64), x64.abs() / 2048.0);
                    let tolerance = (gelu_tanh(x64 + step) - gelu_tanh(x64 - step)).abs()
                        + want.abs() / 2048.0
                        + 1e-7;
                    assert!(
                        (got - want).abs() <= tolerance,
                        "{name}: gelu({x}) = {got}, want {want}"
                    );
                }
            }
        }
    }

    /// Reproducible values in [−scale, scale) without a dependency.
    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9e37_79b9) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state >> 8) as f32 / (1 << 23) as f32 * scale - scale
            })
            .collect()
    }

    /// Every lane type against the scalar one, on rows of every length up to a few vectors
    /// (whole vectors, partial ones, both) and a model's width.
    #[test]
    fn every_instruction_set_matches_the_scalar_kernels() {
        let kernels = all_kernels();
        let scalar = kernels[0];
        for len in (1..=3 * MAX_LANES + 1).chain([576, 2048 + 3]) {
            let x = values(len, len as u32, 4.0);
            let y = values(len, len as u32 + 1000, 2.0);
            let gate = values(len, len as u32 + 2000, 12.0);
            let run = |k: RowKernels| {
                let mut norm = x.clone();
                k.rms_norm(&mut norm, &y, 1e-6);
                let mut swiglu = gate.clone();
                k.swiglu(&mut swiglu, &y);
                let mut geglu = gate.clone();
                k.geglu(&mut geglu, &y);
                (norm, swiglu, geglu)
            };
            let want = run(scalar);
            for &k in &kernels[1..] {
                let got = run(k);
                let name = k.isa().name();
                // Fused multiply-adds and other sums of the squares round differently.
                for (i, (a, b)) in got.0.iter().zip(&want.0).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                        "{name} rms_norm, length {len}, element {i}: {a} vs {b}"
                    );
                }
                for (i, (a, b)) in got.1.iter().zip(&want.1).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                        "{name} swiglu, length {len}, element {i}: {a} vs {b}"
                    );
                }
                // A table look-up and one product: the same bits everywhere.
                assert_eq!(got.2, want.2, "{name} geglu, length {len}");
            }
        }
    }

    #[test]
    fn rms_norm_matches_its_definition() {
        for kernels in all_kernels() {
            for len in [1, 7, 64, 576, 2048 + 3] {
                let x = values(len, len as u32, 3.0);
                let weight = values(len, len as u32 + 7, 1.5);
                let mut got = x.clone();
                kernels.rms_norm(&mut got, &weight, 1e-5);
                let mean = x.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / len as f64;
                let scale = 1.0 / (mean + 1e-5).sqrt();
                for (i, ((&g, &v), &w)) in got.iter().zip(&x).zip(&weight).enumerate() {
                    let want = f64::from(v) * scale * f64::from(w);
                    assert!(
                        (f64::from(g) - want).abs() <= 1e-6 * want.abs().max(1.0),
                        "{}, length {len}, element {i}: {g} vs {want}",
                        kernels.isa().name()
                    );
                }
            }
        }
    }

    #[test]
    fn unavailable_instruction_sets_get_no_kernels() {
        let available = Isa::available();
        for isa in [
            Isa::Scalar,
            Isa::Avx2,
            Isa::Avx2Vnni,
            Isa::Avx512,
            Isa::Avx512Vnni,
            Isa::Neon,
            Isa::NeonDotprod,
            Isa::NeonI8mm,
            Isa::Simd128,
        ] {
            assert_eq!(
                RowKernels::for_isa(isa).is_some(),
                available.contains(&isa),
                "{}",
                isa.name()
            );
        }
        assert_eq!(RowKernels::detect().isa(), Isa::detect());
    }
}
