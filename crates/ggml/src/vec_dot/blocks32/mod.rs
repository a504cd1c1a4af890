//! Kernels for the weight types with 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! IQ4_NL) against Q8_0/Q8_1 activations, and for the float types F16, BF16 and F32.

use super::{Isa, KernelFns};
use crate::GgmlType;

pub(super) fn kernel(_weight_type: GgmlType, _isa: Isa) -> Option<KernelFns> {
    None
}
