//! Matrix products with quantized weights: the activations are quantized once to the weight
//! type's partner format, then every output is an integer dot product of a weight row with an
//! activation row, computed by the kernels for this CPU.
//!
//! The weight rows are split across the pool's threads. For a prompt, a thread walks its rows
//! against blocks of activation rows small enough to stay in its cache: through the weight
//! type's GEMM where this CPU has one (its rows repacked into panels once per product, or once
//! at load with [`Matrix::pack_panels`], each panel walked against several tokens at a time),
//! otherwise one weight row at a time against the block (`dot_many`). Either way each weight
//! block is unpacked once for many tokens instead of once per token.
//!
//! The GEMM and `dot_many` add the same exact integer block sums in different orders, so a
//! token's logits differ by rounding between the two paths: with panels packed at load, a
//! server's sequence decoded alone (`dot`) and decoded beside others (the GEMM from 2 tokens)
//! may differ in its last bits, and greedy decoding may pick differently where two logits
//! nearly tie.

use std::ops::Range;
use std::sync::Mutex;

use plumb_backend_ref::HostTensor;
use plumb_ggml::{DotKernel, GemmKernel};
use plumb_model::{Activations, WeightTensor};

use crate::outliers::{self, RowOutliers};
use crate::pool::{for_each_unit, for_each_unit_in_shares, split, ThreadPool};
use crate::shared_out::SharedOut;

/// Weight bytes per unit of work when decoding one token (at least one row): units are walked
/// in each thread's consecutive share (see [`for_each_unit_in_shares`]), so they need only be
/// small enough to even out the end of a product.
const UNIT_BYTES_DECODE: usize = 64 * 1024;
/// Weight rows per unit of work when processing a prompt.
const ROWS_PER_UNIT_PROMPT: usize = 64;
/// Bytes of quantized activations walked against one weight row at a time: they stay in L2.
const ACT_BLOCK_BYTES: usize = 192 * 1024;
/// Weight rows walked against one block of activations: they stay in L1.
const ROW_BLOCK: usize = 16;
/// At most this many bytes of packed panels per unit of work, beside the activations in L2.
const PANELS_BYTES: usize = 256 * 1024;
/// Fewer tokens than this take the `dot_many` path when the panels must be packed for the
/// product: packing a panel costs about as much as a few tokens' products.
const GEMM_MIN_TOKENS: usize = 8;

thread_local! {
    /// Each pool thread's output tile, kept between calls.
    static TILE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Each pool thread's packed panels and activation scratch row, kept between calls.
    static PANELS: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Fewer tokens than this take the `dot_many` path even when the panels are packed: one
/// token reads fewer bytes from the quantized rows than from the (wider) panels.
const PACKED_GEMM_MIN_TOKENS: usize = 2;

/// A weight matrix and the kernel for its type.
pub struct Matrix {
    pub tensor: WeightTensor,
    pub kernel: DotKernel,
    /// Every panel of the GEMM, packed once at load (see [`Matrix::pack_panels`]), or `None`
    /// when products pack the panels they need each time.
    pub panels: Option<Vec<u8>>,
}

impl Matrix {
    /// Packs all of this matrix's rows into its GEMM's panels, panel `p` holding rows
    /// `p·panel_rows..`, so that products over a few tokens (a server's batched decode) need
    /// not repack the whole matrix each time: at 8 tokens, repacking took half the time of
    /// every product. Costs memory beside the mapped file (about 1–2× the weight bytes; with
    /// AVX-512 VNNI, Q5_0 and Q8_0 panels are their rows' size; with AVX2, Q8_0's are and
    /// Q5_0's are 1.7× it).
    pub fn pack_panels(&mut self) {
        let Some(gemm) = self.kernel.kept_gemm() else {
            return;
        };
        let (m, k) = (self.tensor.n_rows(), self.tensor.row_len());
        let mut panels = vec![0u8; m.div_ceil(gemm.panel_rows()) * gemm.panel_bytes(k)];
        let weights = self.tensor.bytes();
        pack_rows(&gemm, weights, weights.len() / m, k, 0..m, &mut panels);
        self.panels = Some(panels);
    }
}

/// Packs weight rows `rows` (from a multiple of the panel height) of `weights`, `k` elements
/// in `row_bytes` each, into consecutive panels of `out`.
fn pack_rows(
    gemm: &GemmKernel,
    weights: &[u8],
    row_bytes: usize,
    k: usize,
    rows: Range<usize>,
    out: &mut [u8],
) {
    let (panel_rows, panel_bytes) = (gemm.panel_rows(), gemm.panel_bytes(k));
    for (j0, panel) in rows
        .clone()
        .step_by(panel_rows)
        .zip(out.chunks_exact_mut(panel_bytes))
    {
        let j1 = (j0 + panel_rows).min(rows.end);
        gemm.pack_panel_unchecked(&weights[j0 * row_bytes..j1 * row_bytes], k, panel);
    }
}

/// Activation rows quantized to a kernel's partner format, or packed for its GEMM, back to
/// back, and the outliers split off before quantizing (see [`crate::outliers`]).
pub struct QuantizedRows {
    bytes: Vec<u8>,
    row_bytes: usize,
    outliers: Vec<RowOutliers>,
}

impl QuantizedRows {
    /// Quantizes every row of `x` (whose width the caller has checked) on the pool.
    pub fn new(pool: &ThreadPool, kernel: &DotKernel, x: &HostTensor) -> QuantizedRows {
        let row_bytes = kernel.act_row_bytes(x.width());
        Self::fill(pool, kernel, x, row_bytes, &|row, dst| {
            kernel.quantize_unchecked(row, dst)
        })
    }

    /// Quantizes every row of `x` and packs it for `gemm`.
    fn packed(
        pool: &ThreadPool,
        kernel: &DotKernel,
        gemm: &GemmKernel,
        x: &HostTensor,
    ) -> QuantizedRows {
        let quantized_bytes = kernel.act_row_bytes(x.width());
        Self::fill(pool, kernel, x, gemm.act_bytes(x.width()), &|row, dst| {
            PANELS.with_borrow_mut(|scratch| {
                scratch.resize(quantized_bytes, 0);
                kernel.quantize_unchecked(row, scratch);
                gemm.pack_act_unchecked(scratch, dst);
            })
        })
    }

    /// Rows of `row_bytes` each, row t written by `write(x_t, row)` on whichever thread owns
    /// it, with its outliers zeroed when the kernel quantizes to 8 bits.
    fn fill(
        pool: &ThreadPool,
        kernel: &DotKernel,
        x: &HostTensor,
        row_bytes: usize,
        write: &(dyn Fn(&[f32], &mut [u8]) + Sync),
    ) -> QuantizedRows {
        let n = x.n_tokens();
        let mut bytes = vec![0u8; n * row_bytes];
        let outliers = Mutex::new(Vec::new());
        let split_off = outliers::quantizes_to_8_bits(kernel);
        let write_row = |t: usize, dst: &mut [u8]| {
            let row = x.row(t);
            match split_off.then(|| outliers::find(row)).flatten() {
                None => write(row, dst),
                Some(columns) => {
                    write(&outliers::without(row, &columns), dst);
                    let row_outliers = RowOutliers { token: t, columns };
                    outliers.lock().expect("no panics").push(row_outliers);
                }
            }
        };
        if n == 1 {
            write_row(0, &mut bytes);
        } else {
            let out = SharedOut::new(&mut bytes);
            pool.run(&|i| {
                for t in split(n, i, pool.n_threads(), 1) {
                    // SAFETY: each row belongs to exactly one thread.
                    write_row(t, unsafe { out.slice(t * row_bytes, row_bytes) });
                }
            });
        }
        let mut outliers = outliers.into_inner().expect("no panics");
        outliers.sort_by_key(|r| r.token);
        QuantizedRows {
            bytes,
            row_bytes,
            outliers,
        }
    }

    fn rows(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.bytes[range.start * self.row_bytes..range.end * self.row_bytes]
    }

    /// Adds the outliers' products (computed in f32) to the product of the quantized rows.
    fn add_outlier_products(&self, pool: &ThreadPool, w: &Matrix, out: &mut HostTensor) {
        if !self.outliers.is_empty() {
            outliers::add_products(pool, &w.tensor, &self.outliers, out);
        }
    }
}

/// `x · Wᵀ`: `out[t][j] = W_j · x_t`. The caller has checked that `x` is `W.row_len()` wide.
pub fn matmul(pool: &ThreadPool, x: &HostTensor, w: &Matrix) -> HostTensor {
    // Panels packed at load are the kept GEMM's (see `DotKernel::kept_gemm`).
    let gemm = match w.panels {
        Some(_) => w.kernel.kept_gemm(),
        None => w.kernel.gemm(),
    };
    match gemm {
        Some(gemm)
            if x.n_tokens() >= GEMM_MIN_TOKENS
                || (w.panels.is_some() && x.n_tokens() >= PACKED_GEMM_MIN_TOKENS) =>
        {
            matmul_panels(pool, x, w, &gemm)
        }
        _ => matmul_rows(pool, x, w),
    }
}

/// [`matmul`] through the GEMM: each unit of work packs its weight rows into panels once,
/// then walks them against every block of tokens.
fn matmul_panels(pool: &ThreadPool, x: &HostTensor, w: &Matrix, gemm: &GemmKernel) -> HostTensor {
    let acts = QuantizedRows::packed(pool, &w.kernel, gemm, x);
    let (n, m, k) = (x.n_tokens(), w.tensor.n_rows(), x.width());
    let weights = w.tensor.bytes();
    let row_bytes = weights.len() / m;
    let panel_rows = gemm.panel_rows();
    let panel_bytes = gemm.panel_bytes(k);
    let panels_per_unit =
        (PANELS_BYTES / panel_bytes.max(1)).clamp(1, ROWS_PER_UNIT_PROMPT / panel_rows);
    let unit_rows = panels_per_unit * panel_rows;
    let tokens_per_block = (ACT_BLOCK_BYTES / acts.row_bytes.max(1)).clamp(1, n);
    let mut out = vec![0.0f32; n * m];
    let shared = SharedOut::new(&mut out);
    for_each_unit(pool, m.div_ceil(unit_rows), &|unit| {
        let rows = unit * unit_rows..((unit + 1) * unit_rows).min(m);
        let panels: Vec<usize> = rows.clone().step_by(panel_rows).collect();
        let walk = |packed: &[u8]| {
            TILE.with_borrow_mut(|tile| {
                tile.resize(tokens_per_block * panel_rows, 0.0);
                for t0 in (0..n).step_by(tokens_per_block) {
                    let tokens = t0..(t0 + tokens_per_block).min(n);
                    let tile = &mut tile[..tokens.len() * panel_rows];
                    for (&j0, panel) in panels.iter().zip(packed.chunks_exact(panel_bytes)) {
                        let nr = panel_rows.min(rows.end - j0);
                        gemm.run_unchecked(panel, acts.rows(tokens.clone()), tile);
                        for (c, t) in tokens.clone().enumerate() {
                            // SAFETY: columns j0..j0 + nr belong to the unit owning those rows.
                            let dst = unsafe { shared.slice(t * m + j0, nr) };
                            dst.copy_from_slice(&tile[c * panel_rows..][..nr]);
                        }
                    }
                }
            });
        };
        if let Some(all) = &w.panels {
            let first = rows.start / panel_rows;
            return walk(&all[first * panel_bytes..(first + panels.len()) * panel_bytes]);
        }
        PANELS.with_borrow_mut(|packed| {
            packed.resize(panels.len() * panel_bytes, 0);
            pack_rows(gemm, weights, row_bytes, k, rows.clone(), packed);
            walk(packed);
        });
    });
    let mut out = HostTensor::new(n, m, out);
    acts.add_outlier_products(pool, w, &mut out);
    out
}

/// [`matmul`] one weight row at a time: `dot` for one token, `dot_many` for several.
fn matmul_rows(pool: &ThreadPool, x: &HostTensor, w: &Matrix) -> HostTensor {
    let acts = QuantizedRows::new(pool, &w.kernel, x);
    let (n, m) = (x.n_tokens(), w.tensor.n_rows());
    let weights = w.tensor.bytes();
    let row_bytes = weights.len() / m;
    let w_row = |j: usize| &weights[j * row_bytes..(j + 1) * row_bytes];
    let mut out = vec![0.0f32; n * m];
    let shared = SharedOut::new(&mut out);
    let tokens_per_block = (ACT_BLOCK_BYTES / acts.row_bytes.max(1)).clamp(1, n.max(1));
    // Rows are handed out in chunks to whichever thread is free: cores of a shared machine do
    // not run at equal speed, and a static split would leave the faster one waiting. One token
    // streams the weights from memory: each thread walks its own share of them in order.
    let chunk = if n == 1 {
        (UNIT_BYTES_DECODE / row_bytes.max(1)).max(1)
    } else {
        ROWS_PER_UNIT_PROMPT
    };
    let work = |unit: usize| {
        let rows = unit * chunk..((unit + 1) * chunk).min(m);
        if n == 1 {
            // SAFETY: output element j of the one token belongs to the unit owning row j.
            let out = unsafe { shared.slice(rows.start, rows.len()) };
            for (o, j) in out.iter_mut().zip(rows) {
                *o = w.kernel.dot_unchecked(w_row(j), &acts.bytes);
            }
            return;
        }
        // One tile of ROW_BLOCK rows × a block of tokens, row-major by weight row, then
        // written out token by token: each token's part is ROW_BLOCK contiguous outputs.
        TILE.with_borrow_mut(|tile| {
            tile.resize(ROW_BLOCK * tokens_per_block, 0.0);
            for t0 in (0..n).step_by(tokens_per_block) {
                let tokens = t0..(t0 + tokens_per_block).min(n);
                let block = acts.rows(tokens.clone());
                let nt = tokens.len();
                for j0 in (rows.start..rows.end).step_by(ROW_BLOCK) {
                    let nr = ROW_BLOCK.min(rows.end - j0);
                    for r in 0..nr {
                        let column = &mut tile[r * nt..(r + 1) * nt];
                        w.kernel.dot_many_unchecked(w_row(j0 + r), block, column);
                    }
                    for (c, t) in tokens.clone().enumerate() {
                        // SAFETY: columns j0..j0 + nr belong to the unit owning those rows.
                        let dst = unsafe { shared.slice(t * m + j0, nr) };
                        for (r, d) in dst.iter_mut().enumerate() {
                            *d = tile[r * nt + c];
                        }
                    }
                }
            }
        });
    };
    if n == 1 {
        for_each_unit_in_shares(pool, m.div_ceil(chunk), &work);
    } else {
        for_each_unit(pool, m.div_ceil(chunk), &work);
    }
    let mut out = HostTensor::new(n, m, out);
    acts.add_outlier_products(pool, w, &mut out);
    out
}
