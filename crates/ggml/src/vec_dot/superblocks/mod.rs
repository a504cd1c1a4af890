//! Kernels for the weight types with 256-element super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
//! IQ4_XS) against Q8_K activations.
//!
//! Every instruction set follows the same plan (`driver`): unpack a weight super-block into
//! levels and sub-block scales once, then for each activation row sum the products of each
//! sub-block in integers, weight them by the sub-block scales in integers, and apply the f32
//! super-block scales once per super-block. Mins (Q2_K, Q4_K, Q5_K), and on x86 the level
//! offsets that keep levels unsigned for `maddubs` (Q3_K's −4, Q6_K's −32), go through the
//! Q8_K block sums instead of through each product.
//!
//! The integer sums are exact; instruction sets differ only in how the f32 side adds up. The
//! scalar kernel converts each super-block's exact total; the SIMD kernels convert partial
//! sums per vector lane and reduce the lanes at the end of the row, so their rounding is
//! relative to the size of those partial sums (levels and offsets apart), not to the final
//! dot product, which may cancel to far less. ggml's SIMD kernels accumulate the same way.
//! SIMD128's kernels reduce their lanes per super-block instead, to the scalar kernel's exact
//! total, and so agree with it bit for bit.
//!
//! `avx512_gemm` is the matrix-matrix kernel ([`crate::vec_dot::gemm`]) of Q4_K, Q5_K and
//! Q6_K, `avx2_gemm` that of Q2_K to Q6_K and IQ4_XS, `neon_gemm` that of all six types:
//! panels of eight weight rows unpacked once, walked against many activation rows.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_gemm;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_gemm;
mod driver;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod gemm_unpacked;
mod layout;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "aarch64")]
mod neon_gemm;
mod q8_k;
mod scalar;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod simd128;
#[cfg(target_arch = "x86_64")]
mod x86;

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

/// The GEMM for `weight_type` on `isa`, where there is one: AVX-512 VNNI, Q4_K, Q5_K, Q6_K;
/// AVX2, Q2_K to Q6_K and IQ4_XS (also on AVX-512, for the types without an AVX-512 VNNI
/// GEMM); NEON with dotprod (`sdot`) or i8mm (`smmla`), all six types.
// Only x86-64 and aarch64 have GEMMs: elsewhere every instruction set answers None.
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_variables)
)]
pub(super) fn gemm(weight_type: GgmlType, isa: Isa) -> Option<GemmFns> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => {
            avx512_gemm::gemm(weight_type).or_else(|| avx2_gemm::gemm(weight_type, false))
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
