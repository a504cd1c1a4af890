//! One forward pass in progress: the backend, the backend's copy of the batch, the
//! cache storage, and the observer that names intermediates.

use crate::backend::{Activations, Backend};
use crate::observer::Observer;
use crate::Result;

pub(crate) struct Pass<'a, 'p, B: Backend> {
    pub backend: &'a B,
    /// The backend's copy of the pass's [`crate::PassInputs`], which the ops that need them
    /// take.
    pub state: &'a B::Pass<'p>,
    pub kv: &'a mut B::KvStorage,
    /// The positions each sequence of the cache may hold (llama.cpp's `n_ctx_seq`), by which
    /// phi3 picks its RoPE factors.
    pub n_ctx: usize,
    observer: Option<&'a mut dyn Observer>,
}

impl<'a, 'p, B: Backend> Pass<'a, 'p, B> {
    pub fn new(
        backend: &'a B,
        state: &'a B::Pass<'p>,
        kv: &'a mut B::KvStorage,
        n_ctx: usize,
        observer: Option<&'a mut dyn Observer>,
    ) -> Self {
        Pass {
            backend,
            state,
            kv,
            n_ctx,
            observer,
        }
    }

    /// Names an intermediate `[width, n_tokens]`: `name-{layer}`, or `name` for `None`.
    pub fn observe(&mut self, t: &B::Tensor, name: &str, layer: Option<usize>) -> Result<()> {
        if self.observer.is_some() {
            self.emit(t, name, layer, &[t.width(), t.n_tokens()])?;
        }
        Ok(())
    }

    /// Names an intermediate made of heads: `[head_dim, n_heads, n_tokens]`.
    pub fn observe_heads(
        &mut self,
        t: &B::Tensor,
        name: &str,
        layer: usize,
        head_dim: usize,
    ) -> Result<()> {
        if self.observer.is_some() {
            let shape = [head_dim, t.width() / head_dim, t.n_tokens()];
            self.emit(t, name, Some(layer), &shape)?;
        }
        Ok(())
    }

    fn emit(
        &mut self,
        t: &B::Tensor,
        name: &str,
        layer: Option<usize>,
        shape: &[usize],
    ) -> Result<()> {
        let Some(observer) = self.observer.as_deref_mut() else {
            return Ok(());
        };
        let name = match layer {
            Some(il) => format!("{name}-{il}"),
            None => name.to_owned(),
        };
        if observer.wants(&name) {
            let data = self.backend.to_host(t)?;
            observer.observe(&name, shape, &data);
        }
        Ok(())
    }
}
