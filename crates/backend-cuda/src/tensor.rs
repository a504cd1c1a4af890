//! Activations on the device.

use cudarc::driver::{CudaSlice, CudaStream};
use plumb_model::{Activations, Result};
use std::sync::Arc;

use crate::activations_q8::QuantizedRows;
use crate::error::failed;
use crate::pool::{Buffer, Pool};

/// Row-major f32 activations in device memory: `n_tokens` rows of `width` values.
pub struct CudaTensor {
    n_tokens: usize,
    width: usize,
    /// At least `n_tokens × width` values (one for an empty tensor: the driver allocates no
    /// zero-sized buffers), from the backend's pool where the pass takes its buffers there.
    data: Buffer<f32>,
    /// The rows quantized to 8 bits by the kernel that wrote them (a decode step's norm or
    /// gated activation), for the products that read them, which then need not quantize them
    /// again. Only `data_mut` reaches the values, and it drops them: they cannot go stale.
    q8: Option<QuantizedRows>,
}

impl CudaTensor {
    /// An uninitialized tensor, for a kernel to fill.
    pub(crate) fn uninit(
        pool: &Arc<Pool>,
        op: &'static str,
        n_tokens: usize,
        width: usize,
    ) -> Result<CudaTensor> {
        // SAFETY: every op that makes a tensor writes all of its elements before it is read.
        let data = unsafe { pool.take::<f32>(op, n_tokens * width) }?;
        Ok(CudaTensor {
            n_tokens,
            width,
            data,
            q8: None,
        })
    }

    /// `n_tokens × width` values in `data`.
    pub(crate) fn from_buffer(n_tokens: usize, width: usize, data: Buffer<f32>) -> CudaTensor {
        CudaTensor {
            n_tokens,
            width,
            data,
            q8: None,
        }
    }

    /// The values.
    pub(crate) fn data(&self) -> &CudaSlice<f32> {
        &self.data
    }

    /// The values, for a kernel that writes them: their 8-bit rows, if any, are dropped, since
    /// they would no longer match.
    pub(crate) fn data_mut(&mut self) -> &mut CudaSlice<f32> {
        self.q8 = None;
        &mut self.data
    }

    /// The 8-bit rows that the kernel which wrote the values made of them, if it did.
    pub(crate) fn q8(&self) -> Option<&QuantizedRows> {
        self.q8.as_ref()
    }

    /// This tensor with `q8`, which the kernel that has just written its values made of them.
    pub(crate) fn with_q8(mut self, q8: QuantizedRows) -> CudaTensor {
        self.q8 = Some(q8);
        self
    }

    /// The device buffer.
    pub(crate) fn into_buffer(self) -> Buffer<f32> {
        self.data
    }

    /// Uploads `n_tokens × width` values from the host.
    pub(crate) fn from_host(
        pool: &Arc<Pool>,
        n_tokens: usize,
        width: usize,
        values: &[f32],
    ) -> Result<CudaTensor> {
        const OP: &str = "from_host";
        if values.len() != n_tokens * width {
            return Err(crate::error::error(
                OP,
                format!(
                    "{} values for a [{n_tokens} × {width}] tensor",
                    values.len()
                ),
            ));
        }
        let mut t = CudaTensor::uninit(pool, OP, n_tokens, width)?;
        if !values.is_empty() {
            pool.stream()
                .memcpy_htod(values, &mut *t.data)
                .map_err(failed(OP))?;
        }
        Ok(t)
    }

    /// The number of values: `n_tokens × width`.
    pub fn len(&self) -> usize {
        self.n_tokens * self.width
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A host copy of the values, row-major.
    pub(crate) fn to_vec(&self, stream: &Arc<CudaStream>, op: &'static str) -> Result<Vec<f32>> {
        if self.is_empty() {
            return Ok(Vec::new());
        }
        stream
            .clone_dtoh(&self.data.slice(..self.len()))
            .map_err(failed(op))
    }
}

impl Activations for CudaTensor {
    fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    fn width(&self) -> usize {
        self.width
    }
}
