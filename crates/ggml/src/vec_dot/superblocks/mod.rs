//! Kernels for the weight types with 256-element super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
//! IQ4_XS) against Q8_K activations.

use super::{Isa, KernelFns};
use crate::GgmlType;

pub(super) fn kernel(_weight_type: GgmlType, _isa: Isa) -> Option<KernelFns> {
    None
}
