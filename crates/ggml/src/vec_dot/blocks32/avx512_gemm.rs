//! The AVX-512 VNNI GEMM ([`crate::vec_dot::gemm`]) of the signed block types (Q4_0, Q5_0,
//! Q8_0, IQ4_NL) against Q8_0 activations.
//!
//! A panel holds sixteen weight rows, one i32 lane of `vpdpbusd` each. Per block it stores the
//! rows' 32 values as eight 64-byte chunks, chunk c holding elements 4c..4c + 4 of every row in
//! turn, then the rows' 16 scales as f16. Broadcasting elements 4c..4c + 4 of an activation
//! block against chunk c adds their products to every row's lane at once: eight instructions
//! cover a block for all sixteen rows, and one conversion, one multiplication and one FMA
//! scale them. A panel block is 544 bytes for 512 weights, about what Q8_0 stores and 30%
//! less than two lanes per row with f32 scales and corrections needed, and every scaling step
//! covers twice the rows.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes; the activations, broadcast straight from
//! memory, must be its second operand, the signed one. So the panel stores every weight value
//! plus 128 (flipping the sign bit): Σ(w + 128)·y = Σw·y + 128·Σy, and each activation block
//! carries −128·Σy, the sum's starting value for every row. Each packed activation block is
//! its 32 values, its scale as f32 and that correction as i32. The walk over blocks and
//! activation rows is the one both families share ([`crate::vec_dot::panel_walk`]).

use std::arch::x86_64::*;

use super::avx512::SignedPair;
use super::formats::{Iq4Nl, Q4_0, Q5_0, Q8_0, Q8_0_BYTES, QK};
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::panel_walk::{self, PanelBlocks};
use crate::GgmlType;

/// Weight rows per panel: one i32 lane each fills a 512-bit register.
const ROWS: usize = 16;
/// Bytes of one value chunk (elements 4c..4c + 4 of every row) and of a block's values.
const CHUNK: usize = 4 * ROWS;
const VALUES: usize = (QK / 4) * CHUNK;
/// Bytes of a panel block: the values, then the rows' f16 scales.
const PANEL_BLOCK_BYTES: usize = VALUES + 2 * ROWS;
/// A packed activation block: 32 values, the f32 scale at `ACT_SCALE`, the i32 correction at
/// `ACT_CORRECTION`.
const ACT_SCALE: usize = QK;
const ACT_CORRECTION: usize = QK + 4;
const ACT_BLOCK_BYTES: usize = QK + 8;

pub(super) fn gemm(weight_type: GgmlType) -> Option<GemmFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q4_0 => fns::<Q4_0>(),
        T::Q5_0 => fns::<Q5_0>(),
        T::Q8_0 => fns::<Q8_0>(),
        T::IQ4_NL => fns::<Iq4Nl>(),
        _ => return None,
    })
}

fn fns<W: SignedPair>() -> GemmFns {
    // SAFETY (both closures): `gemm` is only reached through `DotKernel` for
    // Isa::Avx512Vnni, which it hands out only after `Isa::available()` confirmed at run time
    // that this CPU has AVX-512 F/BW/VL/DQ, VNNI, AVX2, FMA and F16C.
    GemmFns {
        panel_rows: ROWS,
        panel_bytes: |n_blocks| n_blocks * PANEL_BLOCK_BYTES,
        pack_panel: |rows, n_blocks, out| unsafe { pack_panel::<W>(rows, n_blocks, out) },
        act_bytes: |n_blocks| n_blocks * ACT_BLOCK_BYTES,
        pack_act,
        run: |panel, acts, out| unsafe { run(panel, acts, out) },
    }
}

/// Per block, the values as they are, the scale as f32 and −128·Σy.
fn pack_act(act: &[u8], out: &mut [u8]) {
    for (block, o) in act
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(ACT_BLOCK_BYTES))
    {
        o[..QK].copy_from_slice(&block[2..]);
        let d = crate::fp::read_f16(block, 0);
        o[ACT_SCALE..ACT_CORRECTION].copy_from_slice(&d.to_le_bytes());
        let sum: i32 = block[2..].iter().map(|&q| i32::from(q as i8)).sum();
        o[ACT_CORRECTION..].copy_from_slice(&(-128 * sum).to_le_bytes());
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pack_panel<W: SignedPair>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let out = &mut out[..n_blocks * PANEL_BLOCK_BYTES];
    out.fill(0);
    let row_bytes = n_blocks * W::BYTES;
    for (r, row) in rows.chunks_exact(row_bytes.max(1)).take(ROWS).enumerate() {
        let mut b = 0;
        while b + 2 <= n_blocks {
            // SAFETY (`values`): `pair` is two whole blocks.
            let pair = &row[b * W::BYTES..(b + 2) * W::BYTES];
            place(out, r, b, 2, W::values(pair.as_ptr()), pair);
            b += 2;
        }
        if b < n_blocks {
            // The last odd block, paired with zeros (two blocks of the widest type).
            let mut pair = [0u8; 2 * Q8_0_BYTES];
            pair[..W::BYTES].copy_from_slice(&row[b * W::BYTES..]);
            place(out, r, b, 1, W::values(pair.as_ptr()), &pair[..W::BYTES]);
        }
    }
}

/// Places the first `n` of the two blocks in `values` (their signed values) and `blocks`
/// (their bytes, for the f16 scale at the start of each) as row `r` of panel blocks `b..`.
#[inline(always)]
unsafe fn place(out: &mut [u8], r: usize, b: usize, n: usize, values: __m512i, blocks: &[u8]) {
    let mut unsigned = [0u8; 2 * QK];
    let flipped = _mm512_xor_si512(values, _mm512_set1_epi8(-128));
    _mm512_storeu_si512(unsigned.as_mut_ptr().cast(), flipped);
    let block_bytes = blocks.len() / n;
    for h in 0..n {
        let block = &mut out[(b + h) * PANEL_BLOCK_BYTES..][..PANEL_BLOCK_BYTES];
        for (c, four) in unsigned[h * QK..][..QK].chunks_exact(4).enumerate() {
            block[c * CHUNK + 4 * r..][..4].copy_from_slice(four);
        }
        block[VALUES + 2 * r..][..2].copy_from_slice(&blocks[h * block_bytes..][..2]);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn run(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<SignedBlocks>(panel, acts, out)
}

/// The panel blocks of every signed type: once packed, their values are plain bytes.
struct SignedBlocks;

/// The four bytes at `p` in every 32-bit lane.
#[inline(always)]
unsafe fn bytes4(p: *const u8) -> __m512i {
    _mm512_set1_epi32(p.cast::<i32>().read_unaligned())
}

impl PanelBlocks for SignedBlocks {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = PANEL_BLOCK_BYTES;
    const ACT_BYTES: usize = ACT_BLOCK_BYTES;

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m512; N],
    ) {
        let mut w = [_mm512_setzero_si512(); QK / 4];
        for (c, chunk) in w.iter_mut().enumerate() {
            *chunk = _mm512_loadu_si512(panel.add(c * CHUNK).cast());
        }
        let d_w = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(VALUES).cast()));
        // Indexed so that the loops unroll and the accumulators stay in registers.
        for j in 0..N {
            let y = acts[j];
            let mut s = bytes4(y.add(ACT_CORRECTION));
            for (c, &chunk) in w.iter().enumerate() {
                s = _mm512_dpbusd_epi32(s, chunk, bytes4(y.add(4 * c)));
            }
            let d_a = y.add(ACT_SCALE).cast::<f32>().read_unaligned();
            let scale = _mm512_mul_ps(d_w, _mm512_set1_ps(d_a));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[j]);
        }
    }

    #[inline(always)]
    unsafe fn store(sums: __m512, out: &mut [f32]) {
        _mm512_storeu_ps(out[..ROWS].as_mut_ptr(), sums);
    }
}
