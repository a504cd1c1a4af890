//! The NEON GEMMs ([`crate::vec_dot::gemm`]) of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS
//! against Q8_K activations: with `sdot` for CPUs with the dot-product extension
//! ([`crate::Isa::NeonDotprod`]), with `smmla` for those with i8mm too
//! ([`crate::Isa::NeonI8mm`]).
//!
//! A panel holds eight weight rows: rows 0–3 in the i32 lanes of one register, rows 4–7 in
//! those of another. Per super-block it stores the rows' 256 levels as the scalar kernel
//! unpacks them (offsets applied: Q3_K's −4, Q6_K's −32, IQ4_XS's non-linear levels), as
//! signed bytes arranged for the multiply ([`crate::vec_dot::neon_multiply`]), which sums
//! each sub-block with each activation row's quants. NEON multiplies signed by signed bytes,
//! so neither operand needs an offset, unlike on x86.
//!
//! Each sub-block's sums are weighted by the rows' sub-block scales (i32, one lane per row)
//! in a multiply-accumulate; the mins go through the activation's sub-block sums, one more
//! multiply-accumulate per sub-block. One conversion and one FMA per super-block (two with
//! mins) apply the f32 scales. The integer sums are the scalar kernel's, exactly (at most
//! 32·128·128 per sub-block before its scale of at most 128): outputs differ from
//! [`crate::DotKernel::dot`] only in how the per-lane f32 terms add up.
//!
//! The walk over super-blocks and activation rows is the one all GEMMs share
//! ([`crate::vec_dot::panel_walk`]).

use std::arch::aarch64::*;

use super::gemm_unpacked::{unpacked, Unpacked};
use super::layout::{IQ4_XS_BYTES, Q2_K_BYTES, Q3_K_BYTES, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use super::q8_k::{self, Q8_K_BYTES};
use super::scalar;
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::neon_multiply::{
    gemm_fns, store_rows, zero_rows, Multiply, NeonGemm, RowSums, QUARTER, ROWS,
};
use crate::vec_dot::panel_walk::{self, PanelBlocks};
use crate::{GgmlType, QK_K};

/// Bytes of a panel super-block's values.
const VALUES: usize = QK_K * ROWS;
/// Activation rows walked together.
const GROUP: usize = 4;

/// The GEMM of `weight_type` (the same panels whether packed for one product or kept); with
/// `i8mm`, the one that multiplies with `smmla`.
pub(super) fn gemm(weight_type: GgmlType, i8mm: bool) -> Option<GemmFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q2_K => gemm_fns::<Gemm<Q2K>>(i8mm),
        T::Q3_K => gemm_fns::<Gemm<Q3K>>(i8mm),
        T::Q4_K => gemm_fns::<Gemm<Q4K>>(i8mm),
        T::Q5_K => gemm_fns::<Gemm<Q5K>>(i8mm),
        T::Q6_K => gemm_fns::<Gemm<Q6K>>(i8mm),
        T::IQ4_XS => gemm_fns::<Gemm<Iq4Xs>>(i8mm),
        _ => return None,
    })
}

/// One weight type as this GEMM packs it.
trait Format {
    /// Bytes of one weight super-block.
    const WEIGHT_BYTES: usize;
    /// Sub-blocks of 16 or 32 elements.
    const SUB_BLOCKS: usize;
    /// Whether the type has mins (applied through the activation's sub-block sums).
    const MINS: bool;
    fn unpack(block: &[u8]) -> Unpacked;
}

struct Q2K;
struct Q3K;
struct Q4K;
struct Q5K;
struct Q6K;
struct Iq4Xs;

impl Format for Q2K {
    const WEIGHT_BYTES: usize = Q2_K_BYTES;
    const SUB_BLOCKS: usize = 16;
    const MINS: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q2_k(block))
    }
}

impl Format for Q3K {
    const WEIGHT_BYTES: usize = Q3_K_BYTES;
    const SUB_BLOCKS: usize = 16;
    const MINS: bool = false;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q3_k(block))
    }
}

impl Format for Q4K {
    const WEIGHT_BYTES: usize = Q4_K_BYTES;
    const SUB_BLOCKS: usize = 8;
    const MINS: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q4_k(block))
    }
}

impl Format for Q5K {
    const WEIGHT_BYTES: usize = Q5_K_BYTES;
    const SUB_BLOCKS: usize = 8;
    const MINS: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q5_k(block))
    }
}

impl Format for Q6K {
    const WEIGHT_BYTES: usize = Q6_K_BYTES;
    const SUB_BLOCKS: usize = 16;
    const MINS: bool = false;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q6_k(block))
    }
}

impl Format for Iq4Xs {
    const WEIGHT_BYTES: usize = IQ4_XS_BYTES;
    const SUB_BLOCKS: usize = 8;
    const MINS: bool = false;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_iq4_xs(block))
    }
}

/// The byte layout of a panel super-block of format `F`: its values; per sub-block the rows'
/// scales as i32; with mins, per sub-block the rows' mins as i32; the rows' `d` and, with
/// mins, `dmin` as f32. And of a packed activation super-block: its 256 quants; with mins,
/// the sub-block sums as i32; `d`.
struct Layout<F>(F);

impl<F: Format> Layout<F> {
    const SCALES: usize = VALUES;
    const MINS: usize = Self::SCALES + 4 * ROWS * F::SUB_BLOCKS;
    const D: usize = Self::MINS + if F::MINS { 4 * ROWS * F::SUB_BLOCKS } else { 0 };
    const DMIN: usize = Self::D + 4 * ROWS;
    const BLOCK_BYTES: usize = Self::DMIN + if F::MINS { 4 * ROWS } else { 0 };
    const ACT_SUMS: usize = QK_K;
    const ACT_D: usize = QK_K + if F::MINS { 4 * F::SUB_BLOCKS } else { 0 };
    const ACT_BYTES: usize = Self::ACT_D + 4;
}

fn pack_panel<F: Format, M: Multiply>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let block_bytes = Layout::<F>::BLOCK_BYTES;
    let out = &mut out[..n_blocks * block_bytes];
    out.fill(0);
    let row_bytes = n_blocks * F::WEIGHT_BYTES;
    for (r, row) in rows.chunks_exact(row_bytes.max(1)).take(ROWS).enumerate() {
        for (block, o) in row
            .chunks_exact(F::WEIGHT_BYTES)
            .zip(out.chunks_exact_mut(block_bytes))
        {
            let u = F::unpack(block);
            for (e, &v) in u.q.iter().enumerate() {
                o[M::position(r, e)] = v as u8;
            }
            for j in 0..F::SUB_BLOCKS {
                let at = 4 * (ROWS * j + r);
                o[Layout::<F>::SCALES + at..][..4].copy_from_slice(&u.scales[j].to_le_bytes());
                if F::MINS {
                    o[Layout::<F>::MINS + at..][..4].copy_from_slice(&u.mins[j].to_le_bytes());
                }
            }
            o[Layout::<F>::D + 4 * r..][..4].copy_from_slice(&u.d.to_le_bytes());
            if F::MINS {
                o[Layout::<F>::DMIN + 4 * r..][..4].copy_from_slice(&u.dmin.to_le_bytes());
            }
        }
    }
}

fn pack_act<F: Format>(act: &[u8], out: &mut [u8]) {
    // Q8_K's block sums are of 16 quants each.
    let sums_per_sub = QK_K / F::SUB_BLOCKS / 16;
    for (block, o) in act
        .chunks_exact(Q8_K_BYTES)
        .zip(out.chunks_exact_mut(Layout::<F>::ACT_BYTES))
    {
        o[..QK_K].copy_from_slice(q8_k::qs(block));
        if F::MINS {
            for j in 0..F::SUB_BLOCKS {
                let sum: i32 = (j * sums_per_sub..(j + 1) * sums_per_sub)
                    .map(|k| q8_k::bsum(block, k))
                    .sum();
                o[Layout::<F>::ACT_SUMS + 4 * j..][..4].copy_from_slice(&sum.to_le_bytes());
            }
        }
        o[Layout::<F>::ACT_D..][..4].copy_from_slice(&q8_k::d(block).to_le_bytes());
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

/// The two registers (rows 0–3, rows 4–7) of 32-bit values at `p`.
#[inline(always)]
unsafe fn i32_rows(p: *const u8) -> [int32x4_t; 2] {
    [vld1q_s32(p.cast()), vld1q_s32(p.add(16).cast())]
}

#[inline(always)]
unsafe fn f32_rows(p: *const u8) -> [float32x4_t; 2] {
    [vld1q_f32(p.cast()), vld1q_f32(p.add(16).cast())]
}

#[inline(always)]
unsafe fn read<T>(p: *const u8) -> T {
    p.cast::<T>().read_unaligned()
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
        let quarters = QK_K / QUARTER / F::SUB_BLOCKS;
        let mut isum = [[vdupq_n_s32(0); 2]; N];
        for j in 0..F::SUB_BLOCKS {
            let sums = M::sums(panel, acts, j * quarters..(j + 1) * quarters);
            let scales = i32_rows(panel.add(Layout::<F>::SCALES + 4 * ROWS * j));
            for i in 0..N {
                for h in 0..2 {
                    isum[i][h] = vmlaq_s32(isum[i][h], sums[i][h], scales[h]);
                }
            }
        }
        let d = f32_rows(panel.add(Layout::<F>::D));
        for i in 0..N {
            let d_a: f32 = read(acts[i].add(Layout::<F>::ACT_D));
            for h in 0..2 {
                let scale = vmulq_n_f32(d[h], d_a);
                acc[i][h] = vfmaq_f32(acc[i][h], vcvtq_f32_s32(isum[i][h]), scale);
            }
            if F::MINS {
                let mut msum = [vdupq_n_s32(0); 2];
                for j in 0..F::SUB_BLOCKS {
                    let mins = i32_rows(panel.add(Layout::<F>::MINS + 4 * ROWS * j));
                    let sum: i32 = read(acts[i].add(Layout::<F>::ACT_SUMS + 4 * j));
                    for h in 0..2 {
                        msum[h] = vmlaq_n_s32(msum[h], mins[h], sum);
                    }
                }
                let dmin = f32_rows(panel.add(Layout::<F>::DMIN));
                for h in 0..2 {
                    let scale = vmulq_n_f32(dmin[h], d_a);
                    acc[i][h] = vfmsq_f32(acc[i][h], vcvtq_f32_s32(msum[h]), scale);
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn store(sums: RowSums, out: &mut [f32]) {
        store_rows(sums, out)
    }
}
