//! Watching the intermediates of a forward pass by name.
//!
//! Names are llama.cpp's graph names: `inp_embd`, `attn_norm-{il}`, `Qcur-{il}`, ...,
//! `result_norm`, `result_output`. Shapes are in ggml order, fastest dimension first:
//! `l_out-3` is `[n_embd, n_tokens]`, `Qcur-0` is `[head_dim, n_head, n_tokens]`. A forward pass
//! without an observer never formats a name nor copies a tensor.

/// Receives named intermediates during a forward pass.
pub trait Observer {
    /// Whether `name` should be copied out at all; lets a tool skip device-to-host copies of
    /// tensors it does not need.
    fn wants(&mut self, _name: &str) -> bool {
        true
    }

    fn observe(&mut self, name: &str, shape: &[usize], data: &[f32]);
}

impl<F: FnMut(&str, &[usize], &[f32])> Observer for F {
    fn observe(&mut self, name: &str, shape: &[usize], data: &[f32]) {
        self(name, shape, data)
    }
}

/// One observed tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedTensor {
    pub name: String,
    /// ggml order.
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// An observer that keeps a copy of everything it sees, in order.
#[derive(Debug, Default)]
pub struct Recorder {
    pub tensors: Vec<ObservedTensor>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    /// The last tensor recorded under `name`.
    pub fn get(&self, name: &str) -> Option<&ObservedTensor> {
        self.tensors.iter().rev().find(|t| t.name == name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|t| t.name.as_str())
    }
}

impl Observer for Recorder {
    fn observe(&mut self, name: &str, shape: &[usize], data: &[f32]) {
        self.tensors.push(ObservedTensor {
            name: name.to_owned(),
            shape: shape.to_vec(),
            data: data.to_vec(),
        });
    }
}
