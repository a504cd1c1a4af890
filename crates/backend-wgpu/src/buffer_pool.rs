//! Activation buffers kept for reuse: a decode step makes the same few dozen sizes of tensor
//! in every layer, and creating (and later destroying) a device buffer for each costs host
//! time in every step. A dropped tensor's buffer goes back to the pool, and the next tensor
//! of its size takes it, also later in the same pass: wgpu and the queue order the dispatches
//! that write it after those that read it before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::gpu::{Gpu, TENSOR_USAGE};

/// Bytes the pool keeps at most; buffers dropped beyond that are freed.
const MAX_POOLED_BYTES: u64 = 256 << 20;

/// Free activation buffers by size.
#[derive(Clone, Default)]
pub(crate) struct BufferPool {
    free: Arc<Mutex<Free>>,
}

#[derive(Default)]
struct Free {
    by_size: HashMap<u64, Vec<wgpu::Buffer>>,
    bytes: u64,
}

impl BufferPool {
    /// A buffer of `bytes` (rounded up to whole words) with the activations' usages: a
    /// pooled one if there is one, with whatever it held.
    pub fn take(&self, gpu: &Gpu, label: &str, bytes: u64) -> wgpu::Buffer {
        let size = bytes.max(4).next_multiple_of(4);
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(buffer) = free.by_size.get_mut(&size).and_then(Vec::pop) {
            free.bytes -= size;
            return buffer;
        }
        drop(free);
        gpu.buffer(label, size, TENSOR_USAGE)
    }

    /// Keeps `buffer` for the next `take` of its size, unless the pool is full.
    pub fn give_back(&self, buffer: wgpu::Buffer) {
        let size = buffer.size();
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.bytes + size <= MAX_POOLED_BYTES {
            free.bytes += size;
            free.by_size.entry(size).or_default().push(buffer);
        }
    }
}
