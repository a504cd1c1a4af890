//! One forward pass's inputs on the device, uploaded once by `begin_pass`: token ids, each
//! token's sequence and position, the output rows, and per KV group the slots the tokens
//! write and the block tables they read through. RoPE angles are computed on the host in
//! f64, once per pass and rotary embedding, and uploaded with them.

use std::cell::RefCell;

use plumb_model::{PassInputs, Rope};

use crate::gpu::Gpu;

pub struct GpuPass<'p> {
    pub(crate) inputs: &'p PassInputs<'p>,
    pub(crate) tokens: wgpu::Buffer,
    /// Per token: sequence, position.
    pub(crate) places: wgpu::Buffer,
    pub(crate) output_rows: wgpu::Buffer,
    /// Per KV group (`KvLayout::groups`).
    pub(crate) groups: Vec<GroupTables>,
    /// `(cos θ, sin θ)` per token and pair, per rotary embedding this pass has used.
    angles: RefCell<Vec<(Rope, wgpu::Buffer)>>,
}

/// One KV group's slots and block tables.
pub(crate) struct GroupTables {
    pub slots: wgpu::Buffer,
    /// `n_seq × stride` block ids: sequence `s`'s table at `s · stride`.
    pub tables: wgpu::Buffer,
    pub stride: usize,
    pub block_shift: u32,
}

impl<'p> GpuPass<'p> {
    pub(crate) fn new(gpu: &Gpu, inputs: &'p PassInputs<'p>) -> Self {
        let places: Vec<u32> = inputs
            .places
            .iter()
            .flat_map(|p| [p.seq as u32, p.pos as u32])
            .collect();
        let output_rows: Vec<u32> = inputs.output_rows.iter().map(|&r| r as u32).collect();
        let groups = (0..inputs.kv.layout().groups.len())
            .map(|g| {
                let tables = inputs.kv.group(g);
                let stride = (0..tables.n_seq())
                    .map(|s| tables.of(s).blocks.len())
                    .max()
                    .unwrap_or(0)
                    .max(1);
                let mut flat = vec![0u32; tables.n_seq() * stride];
                for s in 0..tables.n_seq() {
                    let blocks = tables.of(s).blocks;
                    flat[s * stride..s * stride + blocks.len()].copy_from_slice(blocks);
                }
                let slots: Vec<u32> = tables.slots.iter().map(|&s| s as u32).collect();
                GroupTables {
                    slots: gpu.storage_init("slots", &slots),
                    tables: gpu.storage_init("block tables", &flat),
                    stride,
                    block_shift: tables.block_size().trailing_zeros(),
                }
            })
            .collect();
        GpuPass {
            inputs,
            tokens: gpu.storage_init("tokens", inputs.tokens),
            places: gpu.storage_init("places", &places),
            output_rows: gpu.storage_init("output rows", &output_rows),
            groups,
            angles: RefCell::new(Vec::new()),
        }
    }

    /// The angles of `rope` at this pass's positions, computed on first use.
    pub(crate) fn angles(&self, gpu: &Gpu, rope: &Rope) -> wgpu::Buffer {
        let mut angles = self.angles.borrow_mut();
        if let Some((_, buffer)) = angles.iter().find(|(r, _)| r == rope) {
            return buffer.clone();
        }
        let values: Vec<u32> = self
            .inputs
            .positions
            .iter()
            .flat_map(|&pos| {
                (0..rope.n_rot / 2).flat_map(move |i| {
                    // YaRN's and attn_factor's magnitude included: the kernel just multiplies.
                    let (sin, cos) = rope.sin_cos(pos, i);
                    [(cos as f32).to_bits(), (sin as f32).to_bits()]
                })
            })
            .collect();
        let buffer = gpu.storage_init("rope angles", &values);
        angles.push((rope.clone(), buffer.clone()));
        buffer
    }
}
