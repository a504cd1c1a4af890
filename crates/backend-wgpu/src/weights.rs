//! Weights on the device. Matrices and embedding tables are uploaded once, as the GGUF
//! blocks are stored, and split by rows into chunks no larger than one binding may be
//! (gemma3's 178 MB embedding table is two chunks where bindings stop at 128 MiB). Norm
//! weights and biases are small and uploaded as f32.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use plumb_model::WeightTensor;

use crate::gpu::Gpu;
use crate::quant::Quant;
use crate::wait::block_on;

/// A weight as the wgpu backend holds it.
pub struct GpuWeight {
    pub(crate) name: String,
    pub(crate) kind: WeightKind,
}

pub(crate) enum WeightKind {
    /// Rows in their stored type: a matrix, or a table looked up by row.
    Rows(Arc<RowMatrix>),
    /// A vector in f32.
    Values { buffer: wgpu::Buffer, len: usize },
}

/// A matrix's rows on the device, as stored in the file.
pub(crate) struct RowMatrix {
    /// The tensor, which keeps its file mapped: no other tensor's bytes can take its address
    /// while this upload is known by it.
    _tensor: WeightTensor,
    pub quant: Quant,
    pub row_len: usize,
    pub n_rows: usize,
    pub row_bytes: usize,
    pub chunks: Vec<RowChunk>,
}

/// Consecutive rows in one buffer.
pub(crate) struct RowChunk {
    pub buffer: wgpu::Buffer,
    pub first_row: usize,
    pub n_rows: usize,
}

/// Matrices uploaded so far, by where their bytes are mapped: a model whose output head is
/// its embedding table asks for the same tensor twice, and gets one upload.
#[derive(Default)]
pub(crate) struct Uploaded {
    by_bytes: Mutex<HashMap<(usize, usize), Weak<RowMatrix>>>,
}

impl Uploaded {
    /// The rows of `tensor` on the device, uploaded now unless they already are, in chunks of
    /// at most `max_chunk_bytes`.
    pub fn rows(
        &self,
        gpu: &Gpu,
        tensor: &WeightTensor,
        quant: Quant,
        max_chunk_bytes: u64,
    ) -> Result<Arc<RowMatrix>, String> {
        let bytes = tensor.bytes();
        let key = (bytes.as_ptr() as usize, bytes.len());
        let mut by_bytes = self.by_bytes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(matrix) = by_bytes.get(&key).and_then(Weak::upgrade) {
            return Ok(matrix);
        }
        let matrix = Arc::new(upload_rows(gpu, tensor, quant, max_chunk_bytes)?);
        by_bytes.retain(|_, m| m.strong_count() > 0);
        by_bytes.insert(key, Arc::downgrade(&matrix));
        Ok(matrix)
    }
}

fn upload_rows(
    gpu: &Gpu,
    tensor: &WeightTensor,
    quant: Quant,
    max_chunk_bytes: u64,
) -> Result<RowMatrix, String> {
    let (row_len, n_rows) = (tensor.row_len(), tensor.n_rows());
    if !row_len.is_multiple_of(4) {
        return Err(format!(
            "rows of {row_len} values: the kernels read rows four values at a time"
        ));
    }
    let row_bytes = tensor.bytes().len() / n_rows.max(1);
    let rows_per_chunk = (max_chunk_bytes / row_bytes.max(1) as u64) as usize;
    if rows_per_chunk == 0 {
        return Err(format!(
            "one row is {row_bytes} bytes, more than a binding of {max_chunk_bytes} bytes"
        ));
    }
    let scope = gpu.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let chunks = (0..n_rows)
        .step_by(rows_per_chunk)
        .map(|first_row| {
            let n = rows_per_chunk.min(n_rows - first_row);
            let bytes = &tensor.bytes()[first_row * row_bytes..(first_row + n) * row_bytes];
            let buffer = gpu.buffer(
                tensor.name(),
                bytes.len() as u64,
                wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            );
            gpu.write(&buffer, bytes);
            // The staged copy goes now, so that staging never holds more than one chunk.
            gpu.queue.submit([]);
            RowChunk {
                buffer,
                first_row,
                n_rows: n,
            }
        })
        .collect();
    if let Some(error) = block_on(scope.pop())? {
        return Err(error.to_string());
    }
    Ok(RowMatrix {
        _tensor: tensor.clone(),
        quant,
        row_len,
        n_rows,
        row_bytes,
        chunks,
    })
}
