use plumb_model::Activations;

/// f32 activations in a device buffer: `n_tokens` rows of `width` values, row-major.
pub struct GpuTensor {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) n_tokens: usize,
    pub(crate) width: usize,
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
