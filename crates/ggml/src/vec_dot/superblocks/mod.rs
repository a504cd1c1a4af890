//! Kernels for the weight types with 256-element super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
//! IQ4_XS) against Q8_K activations.
//!
//! Every instruction set follows the same plan (`driver`): unpack a weight super-block into
//! levels and sub-block scales once, then for each activation row sum the products of each
//! sub-block in integers, weight them by the sub-block scales in integers, and apply the f32
//! super-block scales once per super-block. Mins (Q2_K, Q4_K, Q5_K) and level offsets (Q3_K's
//! −4, Q6_K's −32, the SIMD IQ4_XS's +128) go through the Q8_K block sums instead of through
//! each product. Integer sums are exact, so instruction sets differ only in the order of the
//! f32 additions.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod driver;
mod layout;
#[cfg(target_arch = "aarch64")]
mod neon;
mod q8_k;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::{Isa, KernelFns};
use crate::GgmlType;

pub(super) fn kernel(weight_type: GgmlType, isa: Isa) -> Option<KernelFns> {
    match isa {
        Isa::Scalar => scalar::kernel(weight_type),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => avx2::kernel(weight_type),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => avx512::kernel(weight_type, false),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => avx512::kernel(weight_type, true),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => neon::kernel(weight_type, false),
        #[cfg(target_arch = "aarch64")]
        Isa::NeonDotprod => neon::kernel(weight_type, true),
        _ => None,
    }
}
