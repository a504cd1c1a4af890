use plumb_model::Activations;

use crate::buffer_pool::BufferPool;

/// f32 activations in a device buffer: `n_tokens` rows of `width` values, row-major.
pub struct GpuTensor {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) n_tokens: usize,
    pub(crate) width: usize,
    /// Where the buffer goes when the tensor is dropped, if it came from a pool.
    pub(crate) pool: Option<BufferPool>,
}

impl Drop for GpuTensor {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give_back(self.buffer.clone());
        }
    }
}

impl GpuTensor {
    /// Values: `n_tokens × width`.
    pub(crate) fn len(&self) -> usize {
        self.n_tokens * self.width
    }
}

impl Activations for GpuTensor {
    fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    fn width(&self) -> usize {
        self.width
    }
}
