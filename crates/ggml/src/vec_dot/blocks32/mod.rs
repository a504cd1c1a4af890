//! Kernels for the weight types with 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! IQ4_NL) against Q8_0/Q8_1 activations, and for the float types F16, BF16 and F32 against
//! activations of their own type.
//!
//! `formats` says what each block holds, `quantize` how activations are quantized; `scalar`
//! is the definition of every dot product, and each instruction set's file reproduces it.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_gemm;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_gemm;
mod formats;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
mod neon_gemm;
#[cfg(target_arch = "aarch64")]
mod neon_quantize;
mod quantize;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod rows;
mod scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod x86_quantize;

use super::gemm::GemmFns;
use super::KernelFns;
use crate::{GgmlType, Isa};

pub(super) fn kernel(weight_type: GgmlType, isa: Isa) -> Option<KernelFns> {
    match isa {
        Isa::Scalar => scalar::kernel(weight_type),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx2Vnni => avx2::kernel(weight_type),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::kernel(weight_type, false),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => avx512::kernel(weight_type, true),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::kernel(weight_type, false),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod | Isa::NeonI8mm => neon::kernel(weight_type, true),
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => simd128::kernel(weight_type),
        _ => None,
    }
}

/// The GEMM for `weight_type` on `isa`, where there is one: AVX-512 VNNI, signed types;
/// AVX2, signed and offset types, also on AVX-512 for the types without an AVX-512 VNNI GEMM
/// (it took smollm2's Q4_1 pp512 at 2 threads from 907 to 1407 tokens/s here). With `kept`,
/// the one for panels packed once and kept (see [`crate::DotKernel::kept_gemm`]); NEON with
/// dotprod (`sdot`) or i8mm (`smmla`), signed and offset types (the same panels either
/// way).
// Only x86-64 and aarch64 have GEMMs: elsewhere every instruction set answers None.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(super) fn gemm(weight_type: GgmlType, isa: Isa, kept: bool) -> Option<GemmFns> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            avx512_gemm::gemm(weight_type, kept).or_else(|| avx2_gemm::gemm(weight_type, false))
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::Avx512 => avx2_gemm::gemm(weight_type, false),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Vnni => avx2_gemm::gemm(weight_type, true),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => neon_gemm::gemm(weight_type, false),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonI8mm => neon_gemm::gemm(weight_type, true),
        _ => None,
    }
}
