//! The paged KV cache on the device: per layer, one buffer of K slots and one of V slots,
//! each slot a row of f16 values packed two to a word. Slot `s` of a layer holds its row at
//! word `s · width / 2`; the block tables that map positions to slots are the pass's.

use plumb_model::{BlockCopy, KvLayout, LayerKv};

use crate::gpu::{Gpu, TENSOR_USAGE};

/// Bytes of one cached value: f16.
pub const KV_VALUE_BYTES: usize = 2;

pub struct GpuKvStorage {
    pub(crate) layers: Vec<LayerBuffers>,
}

pub(crate) struct LayerBuffers {
    pub shape: LayerKv,
    pub k: wgpu::Buffer,
    pub v: wgpu::Buffer,
}

impl GpuKvStorage {
    /// Zeroed slots for every layer of `layout`. The caller has checked that each buffer
    /// fits a binding.
    pub(crate) fn new(gpu: &Gpu, layout: &KvLayout) -> Self {
        let layers = layout
            .layers
            .iter()
            .map(|shape| {
                let bytes = |width: usize| (shape.n_slots * width * KV_VALUE_BYTES) as u64;
                LayerBuffers {
                    shape: *shape,
                    k: gpu.buffer("kv cache K", bytes(shape.k_width()), TENSOR_USAGE),
                    v: gpu.buffer("kv cache V", bytes(shape.v_width()), TENSOR_USAGE),
                }
            })
            .collect();
        GpuKvStorage { layers }
    }

    /// Every layer's shape, in order: what the checks take.
    pub fn layer_shapes(&self) -> Vec<&LayerKv> {
        self.layers.iter().map(|l| &l.shape).collect()
    }

    /// Records checked block copies, in order. A buffer cannot be copied onto itself, so
    /// each range goes through `scratch`, which must hold the largest of them.
    pub fn copy_blocks(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        scratch: &wgpu::Buffer,
        copies: &[BlockCopy],
    ) {
        for c in copies {
            for layer in self.layers.iter().filter(|l| l.shape.group == c.group) {
                for (buffer, width) in [
                    (&layer.k, layer.shape.k_width()),
                    (&layer.v, layer.shape.v_width()),
                ] {
                    let slot_bytes = (width * KV_VALUE_BYTES) as u64;
                    let len = c.len as u64 * slot_bytes;
                    encoder.copy_buffer_to_buffer(
                        buffer,
                        c.src as u64 * slot_bytes,
                        scratch,
                        0,
                        len,
                    );
                    encoder.copy_buffer_to_buffer(
                        scratch,
                        0,
                        buffer,
                        c.dst as u64 * slot_bytes,
                        len,
                    );
                }
            }
        }
    }

    /// Bytes of the largest copy of `copies`.
    pub fn largest_copy(&self, copies: &[BlockCopy]) -> u64 {
        copies
            .iter()
            .flat_map(|c| {
                self.layers
                    .iter()
                    .filter(move |l| l.shape.group == c.group)
                    .map(move |l| {
                        (c.len * l.shape.k_width().max(l.shape.v_width()) * KV_VALUE_BYTES) as u64
                    })
            })
            .max()
            .unwrap_or(0)
    }
}
