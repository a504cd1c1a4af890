//! Kernels for the weight types with 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
//! IQ4_NL) against Q8_0/Q8_1 activations, and for the float types F16, BF16 and F32 against
//! activations of their own type.
//!
//! `formats` says what each block holds, `quantize` how activations are quantized; `scalar`
//! is the definition of every dot product, and each instruction set's file reproduces it.

mod formats;
mod quantize;
mod scalar;

use super::{Isa, KernelFns};
use crate::GgmlType;

pub(super) fn kernel(weight_type: GgmlType, isa: Isa) -> Option<KernelFns> {
    match isa {
        Isa::Scalar => scalar::kernel(weight_type),
        _ => None,
    }
}
