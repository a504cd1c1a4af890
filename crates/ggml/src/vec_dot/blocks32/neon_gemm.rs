//! The NEON GEMMs ([`crate::vec_dot::gemm`]) of the 32-element block types against Q8_0
//! and Q8_1 activations: with `sdot` for CPUs with the dot-product extension
//! ([`crate::Isa::NeonDotprod`]), with `smmla` for those with i8mm too
//! ([`crate::Isa::NeonI8mm`]).
//!
//! A panel holds eight weight rows: rows 0–3 in the i32 lanes of one register, rows 4–7 in
//! those of another. A panel block's 32 values of every row are arranged for the multiply
//! ([`crate::vec_dot::neon_multiply`]), which sums them with each activation row's. NEON
//! multiplies signed bytes by signed bytes, so both operands are the values as they are: the
//! signed types' (Q4_0, Q5_0, Q8_0, IQ4_NL) against Q8_0's quants, and the offset types'
//! levels 0..32 (Q4_1, Q5_1) against Q8_1's, whose m·s share is one more FMA per block. No
//! sum can overflow: a block's is at most 32·128·128 in magnitude.
//!
//! The rows' scales follow the values as f32 (and the offset types' mins). A packed
//! activation block is its 32 quants, its scale as f32 and, against Q8_1, s as f32. Integer
//! sums are exact: outputs differ from [`crate::DotKernel::dot`] only in the order their
//! per-block f32 terms add up.
//!
//! The walk over blocks and activation rows is the one all GEMMs share
//! ([`crate::vec_dot::panel_walk`]).

use std::arch::aarch64::*;

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES, QK,
};
use crate::fp::read_f16;
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::neon_multiply::{
    gemm_fns, store_rows, zero_rows, Multiply, NeonGemm, RowSums, QUARTER, ROWS,
};
use crate::vec_dot::panel_walk::{self, PanelBlocks};
use crate::GgmlType;

/// Bytes of a panel block's values.
const VALUES: usize = QK * ROWS;
/// Activation rows walked together: their integer and f32 sums (four registers each) and a
/// quarter block's weights (eight) fit the 32 registers.
const GROUP: usize = 4;

/// The GEMM of `weight_type` (the same panels whether packed for one product or kept); with
/// `i8mm`, the one that multiplies with `smmla`.
pub(super) fn gemm(weight_type: GgmlType, i8mm: bool) -> Option<GemmFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q4_0 => gemm_fns::<Gemm<Signed<Q4_0>>>(i8mm),
        T::Q5_0 => gemm_fns::<Gemm<Signed<Q5_0>>>(i8mm),
        T::Q8_0 => gemm_fns::<Gemm<Signed<Q8_0>>>(i8mm),
        T::IQ4_NL => gemm_fns::<Gemm<Signed<Iq4Nl>>>(i8mm),
        T::Q4_1 => gemm_fns::<Gemm<Offset<Q4_1>>>(i8mm),
        T::Q5_1 => gemm_fns::<Gemm<Offset<Q5_1>>>(i8mm),
        _ => return None,
    })
}

/// One weight type as this GEMM packs it.
trait Format {
    /// Whether the type has an offset (mins, against Q8_1 activations).
    const OFFSET: bool;
    /// Bytes of one weight block.
    const BYTES: usize;
    /// The block's scale, its min (0 without an offset) and its 32 values as signed bytes.
    fn unpack(block: &[u8]) -> (f32, f32, [i8; QK]);
}

/// A type whose values are signed.
struct Signed<W>(W);
/// A type whose levels are offset by a min.
struct Offset<W>(W);

impl<W: SignedBlocks> Format for Signed<W> {
    const OFFSET: bool = false;
    const BYTES: usize = W::BYTES;
    fn unpack(block: &[u8]) -> (f32, f32, [i8; QK]) {
        let (d, q) = W::unpack(block);
        (d, 0.0, q)
    }
}

impl<W: OffsetBlocks> Format for Offset<W> {
    const OFFSET: bool = true;
    const BYTES: usize = W::BYTES;
    fn unpack(block: &[u8]) -> (f32, f32, [i8; QK]) {
        let (d, m, q) = W::unpack(block);
        // Levels are below 32.
        (d, m, q.map(|v| v as i8))
    }
}

/// The byte layout of a panel block of format `F` (its values, the rows' f32 scales and, with
/// an offset, their f32 mins) and of a packed activation block (its 32 quants, its f32 scale
/// and, against Q8_1, s as f32).
struct Layout<F>(F);

impl<F: Format> Layout<F> {
    const SCALES: usize = VALUES;
    const MINS: usize = VALUES + 4 * ROWS;
    const BLOCK_BYTES: usize = Self::MINS + if F::OFFSET { 4 * ROWS } else { 0 };
    const ACT_SCALE: usize = QK;
    const ACT_S: usize = QK + 4;
    const ACT_BYTES: usize = QK + if F::OFFSET { 8 } else { 4 };
}

fn pack_panel<F: Format, M: Multiply>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let block_bytes = Layout::<F>::BLOCK_BYTES;
    let out = &mut out[..n_blocks * block_bytes];
    out.fill(0);
    let row_bytes = n_blocks * F::BYTES;
    for (r, row) in rows.chunks_exact(row_bytes.max(1)).take(ROWS).enumerate() {
        for (block, o) in row
            .chunks_exact(F::BYTES)
            .zip(out.chunks_exact_mut(block_bytes))
        {
            let (d, m, values) = F::unpack(block);
            for (e, v) in values.into_iter().enumerate() {
                o[M::position(r, e)] = v as u8;
            }
            o[Layout::<F>::SCALES + 4 * r..][..4].copy_from_slice(&d.to_le_bytes());
            if F::OFFSET {
                o[Layout::<F>::MINS + 4 * r..][..4].copy_from_slice(&m.to_le_bytes());
            }
        }
    }
}

fn pack_act<F: Format>(act: &[u8], out: &mut [u8]) {
    let (in_bytes, values_at) = if F::OFFSET {
        (Q8_1_BYTES, 4)
    } else {
        (Q8_0_BYTES, 2)
    };
    for (block, o) in act
        .chunks_exact(in_bytes)
        .zip(out.chunks_exact_mut(Layout::<F>::ACT_BYTES))
    {
        o[..QK].copy_from_slice(&block[values_at..values_at + QK]);
        let d = read_f16(block, 0);
        o[Layout::<F>::ACT_SCALE..][..4].copy_from_slice(&d.to_le_bytes());
        if F::OFFSET {
            let s = read_f16(block, 2);
            o[Layout::<F>::ACT_S..][..4].copy_from_slice(&s.to_le_bytes());
        }
    }
}

/// Format `F` as [`gemm_fns`] hands it out.
struct Gemm<F>(F);

impl<F: Format> NeonGemm for Gemm<F> {
    const PANEL_BYTES: usize = Layout::<F>::BLOCK_BYTES;
    const ACT_BYTES: usize = Layout::<F>::ACT_BYTES;

    fn pack_panel<M: Multiply>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
        pack_panel::<F, M>(rows, n_blocks, out)
    }

    fn pack_act(act: &[u8], out: &mut [u8]) {
        pack_act::<F>(act, out)
    }

    #[inline(always)]
    unsafe fn run<M: Multiply>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
        panel_walk::run::<Panel<F, M>, GROUP>(panel, acts, out)
    }
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

/// The panels of format `F` as the walk sees them, multiplied by `M`.
struct Panel<F, M>(F, M);

impl<F: Format, M: Multiply> PanelBlocks for Panel<F, M> {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = Layout::<F>::BLOCK_BYTES;
    const ACT_BYTES: usize = Layout::<F>::ACT_BYTES;
    type Acc = RowSums;

    #[inline(always)]
    unsafe fn zero() -> RowSums {
        zero_rows()
    }

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [RowSums; N],
    ) {
        let sums = M::sums(panel, acts, 0..QK / QUARTER);
        let scales = Layout::<F>::SCALES;
        let d_w = [
            vld1q_f32(panel.add(scales).cast()),
            vld1q_f32(panel.add(scales + 16).cast()),
        ];
        for i in 0..N {
            let d_a = f32_at(acts[i].add(Layout::<F>::ACT_SCALE));
            for h in 0..2 {
                let d = vmulq_n_f32(d_w[h], d_a);
                acc[i][h] = vfmaq_f32(acc[i][h], vcvtq_f32_s32(sums[i][h]), d);
            }
            if F::OFFSET {
                let s_a = f32_at(acts[i].add(Layout::<F>::ACT_S));
                for (h, acc) in acc[i].iter_mut().enumerate() {
                    let m_w = vld1q_f32(panel.add(Layout::<F>::MINS + 16 * h).cast());
                    *acc = vfmaq_n_f32(*acc, m_w, s_a);
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn store(sums: RowSums, out: &mut [f32]) {
        store_rows(sums, out)
    }
}
