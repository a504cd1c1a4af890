//! The walk that the GEMMs of both families share (AVX-512 VNNI, AVX2 and NEON): a panel's
//! blocks, one after the other, against groups of packed activation rows (`GROUP`, then 4, 2
//! and 1), one f32 accumulator per activation row, whose lanes each panel format maps to its
//! rows. A row's operations do not depend on the size of its group.
//!
//! The AVX-512 k-quant panels hold eight weight rows whose `vpdpbusd` lanes 2r and 2r + 1
//! belong to row r ([`ROWS`], [`CHUNK`], [`store_lane_pairs`]); the AVX-512 32-element types'
//! panels hold sixteen rows, one lane each; the AVX2 panels of both families hold eight rows,
//! one lane of a 256-bit register each; the NEON panels eight rows, one lane of two 128-bit
//! registers each.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Weight rows of a panel whose rows have two i32 lanes each.
#[cfg(target_arch = "x86_64")]
pub(super) const ROWS: usize = 8;
/// Bytes of one value chunk: 8 bytes of each row in turn.
#[cfg(target_arch = "x86_64")]
pub(super) const CHUNK: usize = 64;
/// How far ahead of the walk the first group asks for panel bytes. Without it, panels of
/// wide rows (4864 elements: 8 activation rows' blocks no longer fit in L1 beside the panel)
/// streamed from memory at 16 GB/s, a third of what narrow ones got; with it, both reach
/// about 45 GB/s (`gemm_speed`, 8 tokens, 2 threads). Later groups find the panel in cache.
const PREFETCH_AHEAD: usize = 8192;
/// Activation rows the AVX-512 VNNI GEMMs walk together: one accumulator each, and enough
/// independent `vpdpbusd` chains to hide their latency.
#[cfg(target_arch = "x86_64")]
pub(super) const AVX512_GROUP: usize = 8;

/// One weight type's panel blocks, as its GEMM adds them up.
pub(super) trait PanelBlocks {
    /// Weight rows per panel.
    const ROWS: usize;
    /// Bytes of one panel block (all eight rows) and of one packed activation block.
    const PANEL_BYTES: usize;
    const ACT_BYTES: usize;
    /// One activation row's f32 accumulator: a vector whose lanes the format maps to rows.
    type Acc: Copy;

    /// An accumulator of zeros.
    ///
    /// # Safety
    /// The CPU has the instruction set the format is written for.
    unsafe fn zero() -> Self::Acc;

    /// Adds the products of one panel block with one block of each activation row to that
    /// row's accumulator (lane 2r + h: half h of row r). `#[inline(always)]`, so that it
    /// compiles into the caller's `#[target_feature]` function.
    ///
    /// # Safety
    /// `panel` points at a whole panel block and every `acts[j]` at a whole packed activation
    /// block; the CPU has the instruction set the format is written for.
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [Self::Acc; N],
    );

    /// Writes one activation row's accumulator to its `ROWS` outputs, `out[r]` for row r.
    ///
    /// # Safety
    /// As [`PanelBlocks::block`]; `out` is `ROWS` long.
    unsafe fn store(sums: Self::Acc, out: &mut [f32]);
}

/// `out[t · K::ROWS + r] = row r · activation row t` for every whole packed activation row in
/// `acts`, reading no further than the slices' lengths allow; activation rows walked `GROUP`
/// at a time while whole groups remain.
///
/// # Safety
/// The caller runs with `K`'s instruction set enabled (a `#[target_feature]` function).
#[inline(always)]
pub(super) unsafe fn run<K: PanelBlocks, const GROUP: usize>(
    panel: &[u8],
    acts: &[u8],
    out: &mut [f32],
) {
    let n_blocks = panel.len() / K::PANEL_BYTES;
    let act_bytes = n_blocks * K::ACT_BYTES;
    let n = (out.len() / K::ROWS).min(acts.len().checked_div(act_bytes).unwrap_or(usize::MAX));
    debug_assert_eq!(acts.len(), n * act_bytes);
    let panel = &panel[..n_blocks * K::PANEL_BYTES];
    let acts = &acts[..n * act_bytes];
    let out = &mut out[..n * K::ROWS];
    let t = groups::<K, GROUP>(panel, acts, act_bytes, out, 0);
    let t = groups::<K, 4>(panel, acts, act_bytes, out, t);
    let t = groups::<K, 2>(panel, acts, act_bytes, out, t);
    groups::<K, 1>(panel, acts, act_bytes, out, t);
}

/// Fills the outputs of activation rows `start..` `N` rows at a time while whole groups
/// remain; returns the next row.
#[inline(always)]
unsafe fn groups<K: PanelBlocks, const N: usize>(
    panel: &[u8],
    acts: &[u8],
    act_bytes: usize,
    out: &mut [f32],
    start: usize,
) -> usize {
    let n_blocks = panel.len() / K::PANEL_BYTES;
    let n = out.len() / K::ROWS;
    let mut t = start;
    while t + N <= n {
        let mut rows = [acts.as_ptr(); N];
        for (j, row) in rows.iter_mut().enumerate() {
            *row = acts[(t + j) * act_bytes..].as_ptr();
        }
        let mut acc = [K::zero(); N];
        for b in 0..n_blocks {
            if t == 0 {
                prefetch(
                    panel.as_ptr().wrapping_add(b * K::PANEL_BYTES),
                    K::PANEL_BYTES,
                );
            }
            let mut blocks = rows;
            for block in &mut blocks {
                // SAFETY: block b lies within each whole activation row.
                *block = block.add(b * K::ACT_BYTES);
            }
            // SAFETY: block b lies within the panel.
            K::block::<N>(panel.as_ptr().add(b * K::PANEL_BYTES), &blocks, &mut acc);
        }
        for (j, sum) in acc.into_iter().enumerate() {
            K::store(sum, &mut out[(t + j) * K::ROWS..][..K::ROWS]);
        }
        t += N;
    }
    t
}

/// Asks for the `len` bytes [`PREFETCH_AHEAD`] bytes past `p` (the block about to be walked):
/// the panel block that many bytes on, or the start of the next panel.
#[inline(always)]
unsafe fn prefetch(p: *const u8, len: usize) {
    let ahead = p.wrapping_add(PREFETCH_AHEAD);
    for line in (0..len).step_by(64) {
        // A prefetch never faults, even past the end of the panels.
        let line = ahead.wrapping_add(line);
        #[cfg(target_arch = "x86_64")]
        _mm_prefetch::<_MM_HINT_T0>(line.cast());
        #[cfg(target_arch = "aarch64")]
        std::arch::asm!(
            "prfm pldl1keep, [{line}]",
            line = in(reg) line,
            options(nostack, readonly, preserves_flags)
        );
    }
}

/// The 8 bytes at `p` in every 64-bit lane.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn bytes8(p: *const u8) -> __m512i {
    _mm512_set1_epi64(p.cast::<i64>().read_unaligned())
}

/// `out[r] = lane 2r + lane 2r + 1`: [`PanelBlocks::store`] for panels of [`ROWS`] rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn store_lane_pairs(sums: __m512, out: &mut [f32]) {
    let neighbours = _mm512_permute_ps::<0b10_11_00_01>(sums);
    let rows = _mm512_maskz_compress_ps(0x5555, _mm512_add_ps(sums, neighbours));
    _mm256_storeu_ps(out[..ROWS].as_mut_ptr(), _mm512_castps512_ps256(rows));
}
