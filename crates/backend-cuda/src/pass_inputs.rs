//! One pass's bookkeeping on the device: token ids, positions, the rows whose logits are
//! wanted and, per KV layer group, the slot each token writes and the block tables it reads
//! through. [`CudaPass::new`] packs them into one host buffer and uploads it in one copy at
//! the start of the pass; the ops read views of it.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView};
use plumb_model::{PassInputs, Result};

use crate::error::{error, failed};

const OP: &str = "begin_pass";

/// A pass's inputs as the CUDA backend keeps them: the host's, for the checks made before
/// each op, and their device copy, which the kernels read.
pub struct CudaPass<'p> {
    pub(crate) inputs: &'p PassInputs<'p>,
    /// Every list below, end to end.
    buffer: CudaSlice<u32>,
    tokens: Range<usize>,
    positions: Range<usize>,
    output_rows: Range<usize>,
    /// Per KV layer group.
    groups: Vec<GroupInputs>,
}

/// What the kernels of one KV layer group read.
struct GroupInputs {
    slots: Range<usize>,
    /// Per token, where its sequence's block table starts in `tables`.
    table_starts: Range<usize>,
    /// The block tables of the batch's sequences, each once, end to end.
    tables: Range<usize>,
    /// The most positions any token of the batch sees in this group's layers.
    max_visible: usize,
}

/// The device views of one layer's KV inputs.
pub(crate) struct LayerInputs<'a> {
    pub slots: CudaView<'a, u32>,
    pub table_starts: CudaView<'a, u32>,
    pub tables: CudaView<'a, u32>,
    pub max_visible: usize,
}

/// Appends `values` to `buffer` as u32 and returns where they went; fails past u32 (no
/// batch or cache is that large).
fn push(
    buffer: &mut Vec<u32>,
    what: &str,
    values: impl IntoIterator<Item = usize>,
) -> Result<Range<usize>> {
    let start = buffer.len();
    for v in values {
        buffer.push(u32::try_from(v).map_err(|_| error(OP, format!("{what} {v} exceeds u32")))?);
    }
    Ok(start..buffer.len())
}

impl<'p> CudaPass<'p> {
    pub(crate) fn new(stream: &Arc<CudaStream>, inputs: &'p PassInputs<'p>) -> Result<Self> {
        let mut host = Vec::new();
        let tokens = push(
            &mut host,
            "token",
            inputs.tokens.iter().map(|&t| t as usize),
        )?;
        let positions = push(&mut host, "position", inputs.positions.iter().copied())?;
        let output_rows = push(&mut host, "output row", inputs.output_rows.iter().copied())?;
        let layout = inputs.kv.layout();
        let mut groups = Vec::with_capacity(layout.groups.len());
        for (g, group) in layout.groups.iter().enumerate() {
            let kv = inputs.kv.group(g);
            let slots = push(&mut host, "slot", kv.slots.iter().copied())?;
            // Each sequence's table once, in order of the sequence's first token.
            let mut seen: Vec<(usize, usize)> = Vec::new();
            let mut tables: Vec<usize> = Vec::new();
            let mut starts = Vec::with_capacity(inputs.places.len());
            for place in inputs.places {
                let start = match seen.iter().find(|(seq, _)| *seq == place.seq) {
                    Some(&(_, start)) => start,
                    None => {
                        let start = tables.len();
                        tables.extend(kv.of(place.seq).blocks.iter().map(|&b| b as usize));
                        seen.push((place.seq, start));
                        start
                    }
                };
                starts.push(start);
            }
            let table_starts = push(&mut host, "block table start", starts)?;
            let tables = push(&mut host, "block", tables)?;
            let max_visible = inputs
                .places
                .iter()
                .map(|p| match group.window {
                    Some(w) => (p.pos + 1).min(w),
                    None => p.pos + 1,
                })
                .max()
                .unwrap_or(0);
            groups.push(GroupInputs {
                slots,
                table_starts,
                tables,
                max_visible,
            });
        }
        // The driver makes no empty buffers.
        if host.is_empty() {
            host.push(0);
        }
        let buffer = stream.clone_htod(&host).map_err(failed(OP))?;
        Ok(CudaPass {
            inputs,
            buffer,
            tokens,
            positions,
            output_rows,
            groups,
        })
    }

    pub(crate) fn n_tokens(&self) -> usize {
        self.inputs.n_tokens()
    }

    pub(crate) fn tokens(&self) -> CudaView<'_, u32> {
        self.buffer.slice(self.tokens.clone())
    }

    pub(crate) fn positions(&self) -> CudaView<'_, u32> {
        self.buffer.slice(self.positions.clone())
    }

    pub(crate) fn output_rows(&self) -> CudaView<'_, u32> {
        self.buffer.slice(self.output_rows.clone())
    }

    /// The KV inputs of group `group` (the caller has checked that the layout has it).
    pub(crate) fn group(&self, group: usize) -> LayerInputs<'_> {
        let g = &self.groups[group];
        LayerInputs {
            slots: self.buffer.slice(g.slots.clone()),
            table_starts: self.buffer.slice(g.table_starts.clone()),
            tables: self.buffer.slice(g.tables.clone()),
            max_visible: g.max_visible,
        }
    }
}
