//! The kernels' parameters: each dispatch's few words, staged on the host and written to
//! uniform buffers that are kept from one pass to the next, with one write per buffer before
//! each submission of what was staged since the last. A pass's parameters take offsets of
//! their own, also when it is submitted in parts, so that no write reaches a binding that
//! submitted dispatches still read. A buffer created per dispatch costs host time in every
//! decode step, hundreds of times over.

use crate::bind_groups::Bound;
use crate::gpu::Gpu;

/// Bytes of one uniform buffer: 256 dispatches at the largest offset alignment WebGPU allows
/// (256 bytes, NVIDIA's).
const BLOCK_BYTES: usize = 64 * 1024;

/// The parameters of the dispatches of a pass.
#[derive(Default)]
pub(crate) struct Params {
    /// Uniform buffers of BLOCK_BYTES, the first ones in use by the pass.
    blocks: Vec<wgpu::Buffer>,
    /// What the pass's dispatches' parameters are, block after block.
    staged: Vec<u8>,
    /// Bytes of `staged` written to their buffers.
    written: usize,
}

impl Params {
    /// Where `words`, padded to 16 bytes, will be when the next submission runs.
    pub fn stage(&mut self, gpu: &Gpu, words: &[u32]) -> Bound {
        let align = (gpu.limits.min_uniform_buffer_offset_alignment as usize).max(16);
        let size = (words.len() * 4).next_multiple_of(16).max(16);
        let mut offset = self.staged.len().next_multiple_of(align);
        // A binding lies within one block.
        if offset % BLOCK_BYTES + size > BLOCK_BYTES {
            offset = offset.next_multiple_of(BLOCK_BYTES);
        }
        let block = offset / BLOCK_BYTES;
        while self.blocks.len() <= block {
            self.blocks.push(gpu.buffer(
                "params",
                BLOCK_BYTES as u64,
                wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            ));
        }
        self.staged.resize(offset, 0);
        self.staged.extend_from_slice(bytemuck::cast_slice(words));
        self.staged.resize(offset + size, 0);
        Bound {
            buffer: self.blocks[block].clone(),
            offset: (offset % BLOCK_BYTES) as u64,
            size: std::num::NonZeroU64::new(size as u64),
        }
    }

    /// Writes the parameters staged since the last write to their buffers, ahead of the
    /// submission of the dispatches that read them.
    pub fn write(&mut self, gpu: &Gpu) {
        let mut from = self.written;
        while from < self.staged.len() {
            let block = from / BLOCK_BYTES;
            let to = self.staged.len().min((block + 1) * BLOCK_BYTES);
            let offset = (from % BLOCK_BYTES) as u64;
            gpu.queue
                .write_buffer(&self.blocks[block], offset, &self.staged[from..to]);
            from = to;
        }
        self.written = self.staged.len();
    }

    /// At the end of a pass: the next pass's parameters start again at the first block.
    pub fn restart(&mut self) {
        self.staged.clear();
        self.written = 0;
    }
}
