//! Weights as they live on the device.

use cudarc::driver::CudaSlice;
use plumb_gguf::GgmlType;

/// A tensor's bytes in their GGUF block layout (Q6_K's repacked, see `q6_k_layout`), uploaded
/// once. GGUF shape `[k, m]`: `m` rows of `k` elements (a vector is one row).
pub(crate) struct DeviceWeight {
    pub ty: GgmlType,
    pub k: usize,
    pub m: usize,
    pub bytes: CudaSlice<u8>,
}

/// A weight of the CUDA backend: a matrix (products, embedding lookups) keeps its stored
/// type, with [`crate::matmul::WEIGHT_PADDING`] zero bytes past its data; a vector (norm,
/// bias) is dequantized to f32 once, at load.
pub struct CudaWeight {
    pub(crate) name: String,
    pub(crate) kind: WeightKind,
}

pub(crate) enum WeightKind {
    Matrix(DeviceWeight),
    Vector(CudaSlice<f32>),
}

impl CudaWeight {
    /// The f32 values of a vector weight; `None` for a matrix.
    pub(crate) fn vector(&self) -> Option<&CudaSlice<f32>> {
        match &self.kind {
            WeightKind::Vector(values) => Some(values),
            WeightKind::Matrix(_) => None,
        }
    }

    pub(crate) fn matrix(&self) -> Option<&DeviceWeight> {
        match &self.kind {
            WeightKind::Matrix(w) => Some(w),
            WeightKind::Vector(_) => None,
        }
    }
}
