//! Writing a synthetic model: the header first, then each tensor's rows, made and quantized
//! in batches spread over threads and streamed to disk, so that memory holds one batch and
//! never the file.

use std::path::Path;

use plumb_gguf::GgufStreamWriter;

use crate::weights::make_rows;
use crate::{metadata, plan, FileType, PlannedTensor, Shape, SynthError};

/// About this many values go to one thread at a time: a few megabytes of work, large enough
/// that starting threads costs nothing next to it.
const VALUES_PER_PIECE: usize = 1 << 20;

/// Which model to make.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub shape: Shape,
    pub file_type: FileType,
    /// The weights are a function of the seed alone: the same seed gives the same bytes.
    pub seed: u64,
    /// Threads that make and quantize rows; the bytes do not depend on it.
    pub threads: usize,
}

/// Writes the model to `path` (through a temporary file beside it), calling `progress` with
/// the number of tensor-data bytes after each batch is written.
pub fn write_model(
    options: &Options,
    path: &Path,
    mut progress: impl FnMut(u64),
) -> Result<(), SynthError> {
    let tensors = plan(&options.shape, options.file_type);
    let specs: Vec<_> = tensors.iter().map(|t| t.spec.clone()).collect();
    let md = metadata(&options.shape, options.file_type);
    let mut out = GgufStreamWriter::create(path, &md, &specs)?;
    for tensor in &tensors {
        write_tensor(&mut out, tensor, options, &mut progress)?;
    }
    Ok(out.finish()?)
}

fn write_tensor(
    out: &mut GgufStreamWriter,
    tensor: &PlannedTensor,
    options: &Options,
    progress: &mut impl FnMut(u64),
) -> Result<(), SynthError> {
    let spec = &tensor.spec;
    let row_len = spec.shape[0] as usize;
    let n_rows = spec.shape[1..].iter().product::<u64>() as usize;
    let row_bytes = (tensor.data_bytes() / n_rows as u64) as usize;
    let rows_per_piece = (VALUES_PER_PIECE / row_len).max(1);
    let rows_per_batch = rows_per_piece * options.threads.max(1);
    let mut buffer = vec![0u8; rows_per_batch.min(n_rows) * row_bytes];
    for first in (0..n_rows).step_by(rows_per_batch) {
        let rows = rows_per_batch.min(n_rows - first);
        let batch = &mut buffer[..rows * row_bytes];
        std::thread::scope(|s| {
            let workers: Vec<_> = batch
                .chunks_mut(rows_per_piece * row_bytes)
                .enumerate()
                .map(|(i, piece)| {
                    let first_row = first + i * rows_per_piece;
                    s.spawn(move || {
                        make_rows(
                            options.seed,
                            &spec.name,
                            tensor.role,
                            spec.ggml_type,
                            row_len,
                            first_row,
                            piece,
                        )
                    })
                })
                .collect();
            workers
                .into_iter()
                .try_for_each(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
        })?;
        out.write_data(batch)?;
        progress(batch.len() as u64);
    }
    Ok(())
}
