//! Matrix-matrix products for prompt processing, where one weight matrix meets many
//! activation rows.
//!
//! A [`GemmKernel`] repacks a few weight rows at a time into a *panel*, and each quantized
//! activation row once into a form the kernel reads directly. The kernel then walks a panel
//! against several activation rows at once, so that every weight chunk it loads serves several
//! activation rows and every activation chunk serves all rows of the panel, and the lanes of
//! its integer sums belong to different outputs, so one float scaling step covers a whole
//! panel.
//!
//! Integer block sums are exact, so a panel's outputs differ from [`crate::DotKernel::dot`]
//! only in the order their per-block f32 terms are added. Each output's operations do not
//! depend on how many activation rows are walked together.

use crate::GgmlType;

/// What an instruction set's GEMM provides for one weight type.
#[derive(Clone, Copy)]
pub(crate) struct GemmFns {
    /// Weight rows per panel.
    pub panel_rows: usize,
    /// Bytes of one panel of rows of `n_blocks` blocks.
    pub panel_bytes: fn(n_blocks: usize) -> usize,
    /// Packs `rows` (whole weight rows of `n_blocks` blocks, at most `panel_rows` of them)
    /// into `out` (`panel_bytes(n_blocks)` long); missing rows are zeros.
    pub pack_panel: fn(rows: &[u8], n_blocks: usize, out: &mut [u8]),
    /// Bytes of one packed activation row of `n_blocks` blocks.
    pub act_bytes: fn(n_blocks: usize) -> usize,
    /// Packs one activation row, quantized to the [`crate::DotKernel::act_type`], into `out`.
    pub pack_act: fn(act: &[u8], out: &mut [u8]),
    /// `out[t · panel_rows + r] = row r · activation t` for every packed activation row t.
    pub run: fn(panel: &[u8], acts: &[u8], out: &mut [f32]),
}

/// The GEMM of one weight type on one instruction set. See the module documentation.
#[derive(Clone, Copy)]
pub struct GemmKernel {
    block_size: usize,
    fns: GemmFns,
}

impl std::fmt::Debug for GemmKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GemmKernel({} rows per panel)", self.fns.panel_rows)
    }
}

impl GemmKernel {
    pub(crate) fn new(weight_type: GgmlType, fns: GemmFns) -> GemmKernel {
        GemmKernel {
            block_size: weight_type.block_size(),
            fns,
        }
    }

    /// Weight rows per panel.
    pub fn panel_rows(&self) -> usize {
        self.fns.panel_rows
    }

    /// Bytes of one panel of rows `k` elements long.
    pub fn panel_bytes(&self, k: usize) -> usize {
        (self.fns.panel_bytes)(k / self.block_size)
    }

    /// Bytes of one packed activation row `k` elements long.
    pub fn act_bytes(&self, k: usize) -> usize {
        (self.fns.act_bytes)(k / self.block_size)
    }

    /// Packs up to [`GemmKernel::panel_rows`] weight rows of `k` elements, stored back to
    /// back in `rows`, into `out` ([`GemmKernel::panel_bytes`] long). The caller guarantees the
    /// lengths; wrong ones give wrong results or a panic, never undefined behaviour.
    pub fn pack_panel_unchecked(&self, rows: &[u8], k: usize, out: &mut [u8]) {
        (self.fns.pack_panel)(rows, k / self.block_size, out)
    }

    /// Packs one activation row quantized by [`crate::DotKernel::quantize`] into `out`
    /// ([`GemmKernel::act_bytes`] long). Same contract as
    /// [`GemmKernel::pack_panel_unchecked`].
    pub fn pack_act_unchecked(&self, act: &[u8], out: &mut [u8]) {
        (self.fns.pack_act)(act, out)
    }

    /// The products of a panel with `out.len() / panel_rows` packed activation rows stored
    /// back to back in `acts`: `out[t · panel_rows + r]` is row r of the panel times
    /// activation row t. Same contract as [`GemmKernel::pack_panel_unchecked`].
    pub fn run_unchecked(&self, panel: &[u8], acts: &[u8], out: &mut [f32]) {
        (self.fns.run)(panel, acts, out)
    }
}
