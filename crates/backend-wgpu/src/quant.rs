//! The weight types the kernels read as stored, each with its WGSL dequantization
//! (`shaders/dequant.wgsl`).

use plumb_gguf::GgmlType;

/// A weight type with a WGSL dequantization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Quant {
    F32,
    F16,
    Bf16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4K,
    Q5K,
    Q6K,
}

impl Quant {
    /// The kernels' type for `ty`, if they have one.
    pub fn of(ty: GgmlType) -> Option<Quant> {
        Some(match ty {
            GgmlType::F32 => Quant::F32,
            GgmlType::F16 => Quant::F16,
            GgmlType::BF16 => Quant::Bf16,
            GgmlType::Q4_0 => Quant::Q4_0,
            GgmlType::Q4_1 => Quant::Q4_1,
            GgmlType::Q5_0 => Quant::Q5_0,
            GgmlType::Q5_1 => Quant::Q5_1,
            GgmlType::Q8_0 => Quant::Q8_0,
            GgmlType::Q4_K => Quant::Q4K,
            GgmlType::Q5_K => Quant::Q5K,
            GgmlType::Q6_K => Quant::Q6K,
            _ => return None,
        })
    }

    /// The WGSL function that dequantizes four values of this type.
    pub fn wgsl_fn(self) -> &'static str {
        match self {
            Quant::F32 => "dq4_f32",
            Quant::F16 => "dq4_f16",
            Quant::Bf16 => "dq4_bf16",
            Quant::Q4_0 => "dq4_q4_0",
            Quant::Q4_1 => "dq4_q4_1",
            Quant::Q5_0 => "dq4_q5_0",
            Quant::Q5_1 => "dq4_q5_1",
            Quant::Q8_0 => "dq4_q8_0",
            Quant::Q4K => "dq4_q4_k",
            Quant::Q5K => "dq4_q5_k",
            Quant::Q6K => "dq4_q6_k",
        }
    }

    /// The mat-vec kernels' WGSL function for this type (`shaders/matvec_dot.wgsl`) and the
    /// values of one of its groups: the values that share their scales.
    pub fn matvec_dot(self) -> (&'static str, usize) {
        match self {
            Quant::F32 | Quant::F16 | Quant::Bf16 => ("dot_dq4", 4),
            Quant::Q4_1 | Quant::Q5_0 | Quant::Q5_1 => ("dot_dq4_block32", 32),
            Quant::Q4_0 => ("dot_q4_0", 32),
            Quant::Q8_0 => ("dot_q8_0", 32),
            Quant::Q4K => ("dot_q4_k", 64),
            Quant::Q5K => ("dot_q5_k", 64),
            Quant::Q6K => ("dot_q6_k", 64),
        }
    }

    /// The unit file of `shaders/matvec_units.wgsl` for this type and the values of one
    /// unit; None for the types that take `matvec_subgroup.wgsl`. Only Q4_K has one: a
    /// unit file of Q6_K (a word of each of its three runs of bits per invocation, 16 values)
    /// read 7B's Q6_K weights at 650-800 GB/s on the H200 (by rows and workgroup size), the
    /// group per invocation of `matvec_dot.wgsl` at 845.
    pub fn matvec_unit(self) -> Option<(&'static str, usize)> {
        match self {
            Quant::Q4K => Some((include_str!("shaders/matvec_unit_q4_k.wgsl"), 32)),
            _ => None,
        }
    }
}

/// Every type with a kernel, for the tests.
pub const SUPPORTED: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];
