//! Fast dot products of quantized weight rows with quantized activations, as ggml's CPU
//! backend computes them: the activations are quantized once per row to the weight type's
//! partner format (its `vec_dot_type`: Q8_0, Q8_1 or Q8_K, or F16/BF16/F32 for float weights),
//! and each block's products are summed in integers before its scales are applied.
//!
//! A [`DotKernel`] is chosen once per weight type for the instruction set the CPU has
//! ([`Isa::detect`]); every instruction set's kernel is tested against the scalar one, and the
//! scalar one against the reference [`crate::dot_row`].
//!
//! The kernels live by family: `blocks32` (types with 32-element blocks, and the float types)
//! and `superblocks` (the 256-element k-quants and IQ4_XS). Each family has one file per
//! instruction set.

mod blocks32;
mod gemm;
#[cfg(target_arch = "aarch64")]
mod neon_multiply;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod panel_walk;
mod superblocks;

pub use gemm::GemmKernel;

use crate::{check_lengths, GgmlType, Isa, KernelError};
use gemm::GemmFns;

/// Quantizes one activation row (whole blocks) into the partner format.
pub(crate) type QuantizeFn = fn(x: &[f32], out: &mut [u8]);
/// The dot product of one weight row with one quantized activation row of the same length.
pub(crate) type DotFn = fn(w: &[u8], act: &[u8]) -> f32;
/// One weight row against `out.len()` activation rows stored back to back in `acts`:
/// `out[c] = dot(w, act_c)`. Unpacking the weight once for several activation rows is what
/// makes prompt processing cheaper than repeated matrix-vector products.
pub(crate) type DotManyFn = fn(w: &[u8], acts: &[u8], out: &mut [f32]);

/// What a family module provides for one weight type on one instruction set.
#[derive(Clone, Copy)]
pub(crate) struct KernelFns {
    pub act_type: GgmlType,
    pub quantize: QuantizeFn,
    pub dot: DotFn,
    pub dot_many: DotManyFn,
}

/// The integer dot-product kernel of one weight type on one instruction set.
#[derive(Clone, Copy)]
pub struct DotKernel {
    weight_type: GgmlType,
    isa: Isa,
    fns: KernelFns,
    gemm: Option<GemmFns>,
    kept_gemm: Option<GemmFns>,
}

impl std::fmt::Debug for DotKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DotKernel({}, {})", self.weight_type, self.isa.name())
    }
}

impl DotKernel {
    /// The kernel for `weight_type` on the best instruction set of this machine that has one.
    pub fn new(weight_type: GgmlType) -> Result<DotKernel, KernelError> {
        let mut isas = Isa::available();
        isas.reverse();
        isas.into_iter()
            .find_map(|isa| Self::lookup(weight_type, isa))
            .ok_or(KernelError::UnsupportedType {
                ty: weight_type,
                operation: "quantized dot product",
            })
    }

    /// The kernel for `weight_type` written for `isa`, if there is one and this machine can
    /// run it. Tests use this to compare instruction sets.
    pub fn for_isa(weight_type: GgmlType, isa: Isa) -> Option<DotKernel> {
        if !Isa::available().contains(&isa) {
            return None;
        }
        Self::lookup(weight_type, isa)
    }

    fn lookup(weight_type: GgmlType, isa: Isa) -> Option<DotKernel> {
        let fns =
            blocks32::kernel(weight_type, isa).or_else(|| superblocks::kernel(weight_type, isa))?;
        Some(DotKernel {
            weight_type,
            isa,
            fns,
            gemm: blocks32::gemm(weight_type, isa, false)
                .or_else(|| superblocks::gemm(weight_type, isa)),
            kept_gemm: blocks32::gemm(weight_type, isa, true)
                .or_else(|| superblocks::gemm(weight_type, isa)),
        })
    }

    pub fn weight_type(&self) -> GgmlType {
        self.weight_type
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The matrix-matrix kernel for prompt processing, where this instruction set has one
    /// for this type. It reads the activations this kernel quantizes.
    pub fn gemm(&self) -> Option<GemmKernel> {
        self.gemm.map(|fns| GemmKernel::new(self.weight_type, fns))
    }

    /// The matrix-matrix kernel for panels packed once and kept (a server's weights, walked
    /// against a few tokens at every decode step): its panels are no larger than the quantized
    /// rows where the type allows (Q5_0), at the cost of unpacking them in registers on every
    /// walk, which [`DotKernel::gemm`]'s panels, packed for one product, need not pay.
    pub fn kept_gemm(&self) -> Option<GemmKernel> {
        self.kept_gemm
            .map(|fns| GemmKernel::new(self.weight_type, fns))
    }

    /// The format activations are quantized to (ggml's `vec_dot_type`).
    pub fn act_type(&self) -> GgmlType {
        self.fns.act_type
    }

    /// Bytes of one quantized activation row of `n` elements.
    pub fn act_row_bytes(&self, n: usize) -> usize {
        n / self.fns.act_type.block_size() * self.fns.act_type.block_bytes()
    }

    /// Quantizes an activation row into `out` (exactly [`DotKernel::act_row_bytes`] long).
    pub fn quantize(&self, x: &[f32], out: &mut [u8]) -> Result<(), KernelError> {
        check_lengths(self.fns.act_type, x.len(), out.len())?;
        (self.fns.quantize)(x, out);
        Ok(())
    }

    /// Quantizes an activation row without checking lengths. The caller guarantees that
    /// `x` is whole blocks and `out` exactly their bytes; wrong lengths give wrong results or a
    /// panic, never undefined behaviour.
    pub fn quantize_unchecked(&self, x: &[f32], out: &mut [u8]) {
        (self.fns.quantize)(x, out)
    }

    /// `w · act` for a weight row and a quantized activation row of `n` elements.
    pub fn dot(&self, n: usize, w: &[u8], act: &[u8]) -> Result<f32, KernelError> {
        check_lengths(self.weight_type, n, w.len())?;
        check_lengths(self.fns.act_type, n, act.len())?;
        Ok((self.fns.dot)(w, act))
    }

    /// [`DotKernel::dot`] without the length checks, for the hot loop. Same contract as
    /// [`DotKernel::quantize_unchecked`].
    pub fn dot_unchecked(&self, w: &[u8], act: &[u8]) -> f32 {
        (self.fns.dot)(w, act)
    }

    /// `out[c] = w · act_c` for `out.len()` activation rows stored back to back in `acts`.
    /// Same contract as [`DotKernel::quantize_unchecked`].
    pub fn dot_many_unchecked(&self, w: &[u8], acts: &[u8], out: &mut [f32]) {
        (self.fns.dot_many)(w, acts, out)
    }
}
