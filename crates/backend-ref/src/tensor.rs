use plumb_model::Activations;

/// Row-major f32 activations in host memory: `n_tokens` rows of `width` values.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    n_tokens: usize,
    width: usize,
    data: Vec<f32>,
}

impl HostTensor {
    /// Panics if `data` is not `n_tokens × width` long: the backend only builds tensors whose
    /// size it has just computed.
    pub fn new(n_tokens: usize, width: usize, data: Vec<f32>) -> Self {
        assert_eq!(data.len(), n_tokens * width, "tensor data length");
        HostTensor {
            n_tokens,
            width,
            data,
        }
    }

    pub fn zeros(n_tokens: usize, width: usize) -> Self {
        Self::new(n_tokens, width, vec![0.0; n_tokens * width])
    }

    pub fn row(&self, t: usize) -> &[f32] {
        &self.data[t * self.width..(t + 1) * self.width]
    }

    pub fn data(&self) -> &[f32] {
        &self.data
    }

    pub fn data_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.width.max(1))
    }

    pub fn rows_mut(&mut self) -> impl Iterator<Item = &mut [f32]> {
        self.data.chunks_exact_mut(self.width.max(1))
    }
}

impl Activations for HostTensor {
    fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    fn width(&self) -> usize {
        self.width
    }
}
