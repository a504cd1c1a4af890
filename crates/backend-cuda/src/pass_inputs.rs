//! One pass's bookkeeping on the device: token ids, positions, the rows whose logits are
//! wanted and, per KV layer group, the slot each token writes and the block tables it reads
//! through. [`CudaPass::new`] packs them into one host buffer and uploads it in one copy at
//! the start of the pass; the ops read views of it. A pass that a CUDA graph records or
//! replays has its inputs copied into that graph's buffer instead (see `graphs`).

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
    /// Every list of `layout`, end to end: the pass's own buffer, or the one a CUDA graph of
    /// passes of this layout reads.
    buffer: Arc<CudaSlice<u32>>,
    pub(crate) layout: Layout,
    /// Whether `buffer` is its layout's graph buffer, so that the pass may be recorded or
    /// replayed (see `graphs`).
    pub(crate) in_graph_buffer: bool,
}

/// Where each list lies in a pass's buffer, and the launch shapes that follow from the
/// inputs: two passes of one layout run the same kernels on the same buffers, so that a
/// graph recorded from one replays the other.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct Layout {
    len: usize,
    tokens: Range<usize>,
    positions: Range<usize>,
    output_rows: Range<usize>,
    /// Per KV layer group.
    groups: Vec<GroupInputs>,
}

/// What the kernels of one KV layer group read.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct GroupInputs {
    slots: Range<usize>,
    /// Per token, where its sequence's block table starts in `tables`.
    table_starts: Range<usize>,
    /// The block tables of the batch's sequences, each once, end to end.
    tables: Range<usize>,
    /// The most positions any token of the batch sees in this group's layers (the attention
    /// kernel's splits are cut from it).
    max_visible: usize,
}

/// In a graph's layout, every block table is padded to a multiple of this many blocks, and
/// `max_visible` rounded up to a multiple of this many positions, so that one graph serves
/// the steps of a growing context until it crosses the next multiple.
const TABLE_QUANTUM: usize = 16;
const VISIBLE_QUANTUM: usize = 256;

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

/// Packs `inputs` into one host buffer: the values and their layout. `for_graph` pads the
/// block tables and rounds `max_visible` up (see `TABLE_QUANTUM`); the kernels read only the
/// blocks and positions each token sees, so the padding changes no result.
pub(crate) fn pack(inputs: &PassInputs<'_>, for_graph: bool) -> Result<(Vec<u32>, Layout)> {
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
        let mut seqs: Vec<usize> = Vec::new();
        let mut starts = Vec::with_capacity(inputs.places.len());
        for place in inputs.places {
            let i = match seqs.iter().position(|&seq| seq == place.seq) {
                Some(i) => i,
                None => {
                    seqs.push(place.seq);
                    seqs.len() - 1
                }
            };
            starts.push(i);
        }
        let longest = seqs
            .iter()
            .map(|&s| kv.of(s).blocks.len())
            .max()
            .unwrap_or(0);
        let stride = longest.next_multiple_of(TABLE_QUANTUM);
        let mut tables: Vec<usize> = Vec::new();
        let mut table_at = Vec::with_capacity(seqs.len());
        for &seq in &seqs {
            table_at.push(tables.len());
            tables.extend(kv.of(seq).blocks.iter().map(|&b| b as usize));
            if for_graph {
                tables.resize(table_at.len() * stride, 0);
            }
        }
        let table_starts = push(
            &mut host,
            "block table start",
            starts.into_iter().map(|i| table_at[i]),
        )?;
        let tables = push(&mut host, "block", tables)?;
        let mut max_visible = inputs
            .places
            .iter()
            .map(|p| match group.window {
                Some(w) => (p.pos + 1).min(w),
                None => p.pos + 1,
            })
            .max()
            .unwrap_or(0);
        if for_graph {
            max_visible = max_visible.next_multiple_of(VISIBLE_QUANTUM);
        }
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
    let layout = Layout {
        len: host.len(),
        tokens,
        positions,
        output_rows,
        groups,
    };
    Ok((host, layout))
}

impl Layout {
    /// The u32 values the buffer holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<'p> CudaPass<'p> {
    /// A pass run op by op, its inputs in a buffer of its own.
    pub(crate) fn new(stream: &Arc<CudaStream>, inputs: &'p PassInputs<'p>) -> Result<Self> {
        let (host, layout) = pack(inputs, false)?;
        Self::uploaded(stream, inputs, &host, layout)
    }

    /// A pass run op by op, its inputs (`host`, laid out as `layout`) copied into a buffer of
    /// its own.
    pub(crate) fn uploaded(
        stream: &Arc<CudaStream>,
        inputs: &'p PassInputs<'p>,
        host: &[u32],
        layout: Layout,
    ) -> Result<Self> {
        let buffer = stream.clone_htod(host).map_err(failed(OP))?;
        Ok(CudaPass {
            inputs,
            buffer: Arc::new(buffer),
            layout,
            in_graph_buffer: false,
        })
    }

    /// A pass whose inputs are already in `buffer`, laid out as `layout`.
    pub(crate) fn in_buffer(
        inputs: &'p PassInputs<'p>,
        buffer: Arc<CudaSlice<u32>>,
        layout: Layout,
        in_graph_buffer: bool,
    ) -> Self {
        CudaPass {
            inputs,
            buffer,
            layout,
            in_graph_buffer,
        }
    }

    pub(crate) fn n_tokens(&self) -> usize {
        self.inputs.n_tokens()
    }

    pub(crate) fn tokens(&self) -> CudaView<'_, u32> {
        self.buffer.slice(self.layout.tokens.clone())
    }

    pub(crate) fn positions(&self) -> CudaView<'_, u32> {
        self.buffer.slice(self.layout.positions.clone())
    }

    pub(crate) fn output_rows(&self) -> CudaView<'_, u32> {
        self.buffer.slice(self.layout.output_rows.clone())
    }

    /// The KV inputs of group `group` (the caller has checked that the layout has it).
    pub(crate) fn group(&self, group: usize) -> LayerInputs<'_> {
        let g = &self.layout.groups[group];
        LayerInputs {
            slots: self.buffer.slice(g.slots.clone()),
            table_starts: self.buffer.slice(g.table_starts.clone()),
            tables: self.buffer.slice(g.tables.clone()),
            max_visible: g.max_visible,
        }
    }
}
