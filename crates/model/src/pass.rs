//! One forward pass in progress: the backend, the batch, the cache storage and its block
//! tables, and the observer that names intermediates.

use crate::backend::{Activations, Backend, TokenPos};
use crate::kv_cache::PassKv;
use crate::observer::Observer;
use crate::Result;

pub(crate) struct Pass<'a, B: Backend> {
    pub backend: &'a B,
    pub tokens: &'a [u32],
    pub places: &'a [TokenPos],
    /// `places[t].pos` for each token, the form RoPE takes.
    pub positions: Vec<usize>,
    /// Batch rows whose logits are wanted.
    pub output_rows: &'a [usize],
    pub kv: &'a mut B::KvStorage,
    /// Where each layer's keys and values go and come from.
    pub blocks: &'a PassKv<'a>,
    observer: Option<&'a mut dyn Observer>,
}

impl<'a, B: Backend> Pass<'a, B> {
    pub fn new(
        backend: &'a B,
        tokens: &'a [u32],
        places: &'a [TokenPos],
        output_rows: &'a [usize],
        kv: &'a mut B::KvStorage,
        blocks: &'a PassKv<'a>,
        observer: Option<&'a mut dyn Observer>,
    ) -> Self {
        Pass {
            backend,
            tokens,
            places,
            positions: places.iter().map(|p| p.pos).collect(),
            output_rows,
            kv,
            blocks,
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
