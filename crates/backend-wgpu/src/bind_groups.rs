//! Bind groups kept from one pass to the next. Creating one per dispatch was most
//! of the host's time recording a decode step (0.9 of 1.2 ms for smollm2-135m on lavapipe);
//! with activation buffers from a pool and parameters at the same offsets, a decode step binds
//! what the step before it bound, for every dispatch but those that read the pass's own
//! inputs (tokens, positions, block tables, RoPE angles).

use std::collections::HashMap;
use std::num::NonZeroU64;

use crate::gpu::Gpu;

/// One buffer binding: `size` bytes of `buffer` from `offset` (the rest of it where `None`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct Bound {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    pub size: Option<NonZeroU64>,
}

impl Bound {
    pub fn of(binding: &wgpu::BufferBinding<'_>) -> Bound {
        Bound {
            buffer: binding.buffer.clone(),
            offset: binding.offset,
            size: binding.size,
        }
    }

    fn binding(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: self.size,
        })
    }
}

#[derive(PartialEq, Eq, Hash)]
struct Key {
    pipeline: wgpu::ComputePipeline,
    bound: Vec<Bound>,
}

/// The bind groups of the last pass and of the pending one.
#[derive(Default)]
pub(crate) struct BindGroups {
    /// Each with whether the pending pass uses it.
    by_key: HashMap<Key, (wgpu::BindGroup, bool)>,
}

impl BindGroups {
    /// The bind group of `pipeline` with `bound` at bindings 0, 1, …: a kept one, else a new.
    pub fn get(
        &mut self,
        gpu: &Gpu,
        pipeline: &wgpu::ComputePipeline,
        bound: Vec<Bound>,
    ) -> wgpu::BindGroup {
        let key = Key {
            pipeline: pipeline.clone(),
            bound,
        };
        if let Some((group, used)) = self.by_key.get_mut(&key) {
            *used = true;
            return group.clone();
        }
        let entries: Vec<wgpu::BindGroupEntry<'_>> = key
            .bound
            .iter()
            .enumerate()
            .map(|(i, bound)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: bound.binding(),
            })
            .collect();
        let group = gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        self.by_key.insert(key, (group.clone(), true));
        group
    }

    /// At the end of a pass: forgets the bind groups the pass did not use, and the buffers
    /// they alone held.
    pub fn pass_ended(&mut self) {
        self.by_key.retain(|_, (_, used)| std::mem::take(used));
    }
}
