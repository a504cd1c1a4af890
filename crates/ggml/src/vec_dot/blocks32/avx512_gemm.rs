//! The AVX-512 VNNI GEMM ([`crate::vec_dot::gemm`]) of the signed block types (Q4_0, Q5_0,
//! Q8_0, IQ4_NL) against Q8_0 activations.
//!
//! A panel holds eight weight rows. Per block it stores the rows' 32 signed values as four
//! 64-byte chunks, chunk c holding bytes 8c..8c + 8 of every row in turn. Broadcasting bytes
//! 8c..8c + 8 of an activation block against chunk c makes `vpdpbusd`'s i32 lanes 2r and
//! 2r + 1 partial sums of row r: four instructions cover a block for all eight rows, and one
//! conversion and one FMA scale them. The lanes of row r are added at the end.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes, so an activation block is stored as its
//! values plus 128: Σ(y + 128)·w = Σy·w + 128·Σw, and each lane's sum starts from the panel's
//! −128·Σw for that lane. Each packed activation block is its 32 values, then its scale as
//! f32. The walk over blocks and activation rows is the one both families share
//! ([`crate::vec_dot::panel_walk`]).

use std::arch::x86_64::*;

use super::avx512::SignedPair;
use super::formats::{Iq4Nl, Q4_0, Q5_0, Q8_0, Q8_0_BYTES, QK};
use crate::fp::read_f16;
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::panel_walk::{self, bytes8, PanelBlocks, CHUNK, ROWS};
use crate::GgmlType;

/// Where a panel block's corrections and scales lie, and its size.
const CORRECTIONS: usize = 4 * CHUNK;
const SCALES: usize = CORRECTIONS + 64;
const PANEL_BLOCK_BYTES: usize = SCALES + 64;
/// Bytes of a packed activation block: 32 values and a scale.
const ACT_BLOCK_BYTES: usize = QK + 4;
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

/// Per block, the values plus 128 (flipping the sign bit), then the f32 scale.
fn pack_act(act: &[u8], out: &mut [u8]) {
    for (block, o) in act
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(ACT_BLOCK_BYTES))
    {
        for (v, &q) in o[..QK].iter_mut().zip(&block[2..]) {
            *v = q ^ 0x80;
        }
        o[QK..].copy_from_slice(&read_f16(block, 0).to_le_bytes());
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
            // SAFETY: blocks b and b + 1 lie within the row.
            let pair = row.as_ptr().add(b * W::BYTES);
            place_pair(out, r, b, 2, W::values(pair), [pair, pair.add(W::BYTES)]);
            b += 2;
        }
        if b < n_blocks {
            // The last odd block, paired with zeros.
            let mut pair = [0u8; 2 * Q8_0_BYTES];
            pair[..W::BYTES].copy_from_slice(&row[b * W::BYTES..]);
            place_pair(out, r, b, 1, W::values(pair.as_ptr()), [pair.as_ptr(); 2]);
        }
    }
    for block in out.chunks_exact_mut(PANEL_BLOCK_BYTES) {
        let mut sum = _mm512_setzero_si512();
        for c in 0..4 {
            let chunk = _mm512_loadu_si512(block[c * CHUNK..].as_ptr().cast());
            sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(-128), chunk);
        }
        let correction = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
        _mm512_storeu_si512(block[CORRECTIONS..].as_mut_ptr().cast(), correction);
    }
}

/// Places the values of blocks `b..b + n` of panel row `r` (the first `n` halves of `values`)
/// and their scales, read from the f16 at the start of each block in `blocks`.
#[inline(always)]
unsafe fn place_pair(
    out: &mut [u8],
    r: usize,
    b: usize,
    n: usize,
    values: __m512i,
    blocks: [*const u8; 2],
) {
    let mut chunks = [0u64; 8];
    _mm512_storeu_si512(chunks.as_mut_ptr().cast(), values);
    for h in 0..n {
        let block = &mut out[(b + h) * PANEL_BLOCK_BYTES..][..PANEL_BLOCK_BYTES];
        let p = block.as_mut_ptr();
        for (c, chunk) in chunks[4 * h..4 * h + 4].iter().enumerate() {
            // SAFETY: chunk c of row r lies within the block (r < ROWS).
            p.add(c * CHUNK + r * 8)
                .cast::<u64>()
                .write_unaligned(*chunk);
        }
        let d = read_f16(std::slice::from_raw_parts(blocks[h], 2), 0);
        // SAFETY: lanes 2r and 2r + 1 of the scales lie within the block.
        let scales = p.add(SCALES).cast::<f32>().add(2 * r);
        scales.write_unaligned(d);
        scales.add(1).write_unaligned(d);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn run(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<SignedBlocks>(panel, acts, out)
}

/// The panel blocks of every signed type: once packed, their values are plain bytes.
struct SignedBlocks;

impl PanelBlocks for SignedBlocks {
    const PANEL_BYTES: usize = PANEL_BLOCK_BYTES;
    const ACT_BYTES: usize = ACT_BLOCK_BYTES;

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m512; N],
    ) {
        let w0 = _mm512_loadu_si512(panel.cast());
        let w1 = _mm512_loadu_si512(panel.add(CHUNK).cast());
        let w2 = _mm512_loadu_si512(panel.add(2 * CHUNK).cast());
        let w3 = _mm512_loadu_si512(panel.add(3 * CHUNK).cast());
        let correction = _mm512_loadu_si512(panel.add(CORRECTIONS).cast());
        let d_w = _mm512_loadu_ps(panel.add(SCALES).cast());
        // Indexed so that the loop unrolls and the accumulators stay in registers.
        for j in 0..N {
            let y = acts[j];
            let mut s = _mm512_dpbusd_epi32(correction, bytes8(y), w0);
            s = _mm512_dpbusd_epi32(s, bytes8(y.add(8)), w1);
            s = _mm512_dpbusd_epi32(s, bytes8(y.add(16)), w2);
            s = _mm512_dpbusd_epi32(s, bytes8(y.add(24)), w3);
            let d_a = y.add(QK).cast::<f32>().read_unaligned();
            let scale = _mm512_mul_ps(d_w, _mm512_set1_ps(d_a));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), scale, acc[j]);
        }
    }
}
