//! A weight as it lives on the device.

use cudarc::driver::CudaSlice;
use plumb_gguf::GgmlType;

/// A tensor's bytes in their GGUF block layout, uploaded once. GGUF shape `[k, m]`: `m` rows of
/// `k` elements (a vector is one row).
pub(crate) struct DeviceWeight {
    pub ty: GgmlType,
    pub k: usize,
    pub m: usize,
    pub bytes: CudaSlice<u8>,
}
