//! The KV cache on the device, in f16: per layer, `n_slots` slots of one K row and one V row,
//! addressed as the cache's block tables say (`slot = block · block_size + offset`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use plumb_model::{BlockCopy, KvLayout, LayerKv, Result};

use crate::error::failed;
use crate::kernels::{grid_stride, Kernels};

/// K and V rows as f16 bits.
pub struct CudaKvStorage {
    pub(crate) layers: Vec<LayerStore>,
    /// Unique per storage made, so that a CUDA graph recorded over this cache's buffers is
    /// replayed over no other (see `graphs`).
    pub(crate) id: u64,
}

/// The `id` of the next storage.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

pub(crate) struct LayerStore {
    pub shape: LayerKv,
    pub k: CudaSlice<u16>,
    pub v: CudaSlice<u16>,
}

impl CudaKvStorage {
    /// Zeroed storage for every layer of `layout`.
    pub(crate) fn new(stream: &Arc<CudaStream>, layout: &KvLayout) -> Result<CudaKvStorage> {
        let alloc = |n: usize| {
            stream
                .alloc_zeros::<u16>(n.max(1))
                .map_err(failed("new_kv_storage"))
        };
        let layers = layout
            .layers
            .iter()
            .map(|shape| {
                Ok(LayerStore {
                    shape: *shape,
                    k: alloc(shape.n_slots * shape.k_width())?,
                    v: alloc(shape.n_slots * shape.v_width())?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(CudaKvStorage {
            layers,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub(crate) fn shapes(&self) -> Vec<&LayerKv> {
        self.layers.iter().map(|l| &l.shape).collect()
    }

    /// Makes checked block copies, in order, in every layer of each copy's group.
    pub(crate) fn copy_blocks(
        &mut self,
        stream: &Arc<CudaStream>,
        kernels: &Kernels,
        copies: &[BlockCopy],
    ) -> Result<()> {
        for c in copies {
            for layer in self.layers.iter_mut().filter(|l| l.shape.group == c.group) {
                let (kw, vw) = (layer.shape.k_width(), layer.shape.v_width());
                for (buf, width) in [(&mut layer.k, kw), (&mut layer.v, vw)] {
                    let (src, dst, n) = (
                        (c.src * width) as u64,
                        (c.dst * width) as u64,
                        (c.len * width) as u64,
                    );
                    if n == 0 {
                        continue;
                    }
                    let mut launch = kernels.launch(stream, &kernels.copy_within);
                    launch.arg(buf).arg(&src).arg(&dst).arg(&n);
                    // SAFETY: the copy is checked to lie within the layer's slots.
                    unsafe { launch.run(grid_stride(n as usize)) }
                        .map_err(failed("copy_kv_blocks"))?;
                }
            }
        }
        Ok(())
    }
}
