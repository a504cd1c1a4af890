//! The AVX-512 VNNI GEMM ([`crate::vec_dot::gemm`]) of the signed block types (Q4_0, Q5_0,
//! Q8_0, IQ4_NL) against Q8_0 activations.
//!
//! A panel holds sixteen weight rows, one i32 lane of `vpdpbusd` each. The kernel sees each
//! panel block as eight 64-byte chunks, chunk c holding elements 4c..4c + 4 of every row in
//! turn. Broadcasting elements 4c..4c + 4 of an activation block against chunk c adds their
//! products to every row's lane at once: eight instructions cover a block for all sixteen
//! rows, and one conversion, one multiplication and one FMA scale them.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes; the activations, broadcast straight from
//! memory, must be its second operand, the signed one. So the chunks hold every weight value
//! plus an offset that makes it unsigned: Σ(w + o)·y = Σw·y + o·Σy, and each activation block
//! carries −o·Σy, the sum's starting value for every row. Each packed activation block is its
//! 32 values, its scale as f32 and that correction as i32.
//!
//! How a panel block stores the chunks is the weight type's [`PanelFormat`]; the rows' 16
//! scales follow as f16. Weights are read from memory once per step of a server's batched
//! decode, so a panel should be no larger than the quantized rows:
//! - [`Bytes`] (Q4_0, Q8_0, IQ4_NL): the chunks as they are, w + 128; 544 bytes per 512
//!   weights, Q8_0's own size.
//! - [`FiveBits`] (Q5_0 panels packed once and kept, [`crate::DotKernel::kept_gemm`]; panels
//!   packed for one product are [`Bytes`], cheaper to pack and to walk): the levels q = w + 16 as four 64-byte vectors of nibbles (chunks c
//!   and c + 4 in the low and high nibbles) and 64 bytes of fifth bits, a bit per byte of
//!   every chunk; 352 bytes per 512 weights, Q5_0's own size. Unpacking a block costs about
//!   two instructions per chunk, shared by every activation row walked with it.
//!
//! The walk over blocks and activation rows is the one both families share
//! ([`crate::vec_dot::panel_walk`]).

use std::arch::x86_64::*;

use super::avx512::SignedPair;
use super::formats::{Iq4Nl, Q4_0, Q5_0, Q8_0, Q8_0_BYTES, QK};
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::panel_walk::{self, PanelBlocks, AVX512_GROUP};
use crate::GgmlType;

/// Weight rows per panel: one i32 lane each fills a 512-bit register.
const ROWS: usize = 16;
/// Chunks of a block (four elements of every row each), and bytes of one.
const CHUNKS: usize = QK / 4;
const CHUNK: usize = 4 * ROWS;
/// A packed activation block: 32 values, the f32 scale at `ACT_SCALE`, the i32 correction at
/// `ACT_CORRECTION`.
const ACT_SCALE: usize = QK;
const ACT_CORRECTION: usize = QK + 4;
const ACT_BLOCK_BYTES: usize = QK + 8;

/// The GEMM of `weight_type`; with `kept`, the one for panels packed once and kept.
pub(super) fn gemm(weight_type: GgmlType, kept: bool) -> Option<GemmFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q4_0 => fns::<Q4_0, Bytes>(),
        T::Q5_0 if kept => fns::<Q5_0, FiveBits>(),
        T::Q5_0 => fns::<Q5_0, Bytes>(),
        T::Q8_0 => fns::<Q8_0, Bytes>(),
        T::IQ4_NL => fns::<Iq4Nl, Bytes>(),
        _ => return None,
    })
}

fn fns<W: SignedPair, F: PanelFormat>() -> GemmFns {
    // SAFETY (both closures): `gemm` is only reached through `DotKernel` for
    // Isa::Avx512Vnni, which it hands out only after `Isa::available()` confirmed at run time
    // that this CPU has AVX-512 F/BW/VL/DQ, VNNI, AVX2, FMA and F16C.
    GemmFns {
        panel_rows: ROWS,
        panel_bytes: |n_blocks| n_blocks * Panel::<F>::BLOCK_BYTES,
        pack_panel: |rows, n_blocks, out| unsafe { pack_panel::<W, F>(rows, n_blocks, out) },
        act_bytes: |n_blocks| n_blocks * ACT_BLOCK_BYTES,
        pack_act: pack_act::<F>,
        run: |panel, acts, out| unsafe { run::<F>(panel, acts, out) },
    }
}

/// How a panel block stores its chunks (see the module documentation).
trait PanelFormat {
    /// What a stored level exceeds its weight by.
    const OFFSET: i32;
    /// Bytes of one panel block's levels.
    const LEVEL_BYTES: usize;
    /// Places one block of row `r`, its weights `w`, in `out` (a panel block's levels, zeros
    /// before the first row is placed).
    fn place(w: &[i8; QK], r: usize, out: &mut [u8]);
    /// The eight chunks of the panel block at `p`. `#[inline(always)]`, so that it compiles
    /// into the caller's `#[target_feature]` function.
    ///
    /// # Safety
    /// `p` points at a whole panel block; the CPU has AVX-512 F/BW.
    unsafe fn chunks(p: *const u8) -> [__m512i; CHUNKS];
}

/// The levels w + 128 as bytes, chunk after chunk.
struct Bytes;

impl PanelFormat for Bytes {
    const OFFSET: i32 = 128;
    const LEVEL_BYTES: usize = CHUNKS * CHUNK;

    fn place(w: &[i8; QK], r: usize, out: &mut [u8]) {
        for (c, four) in w.chunks_exact(4).enumerate() {
            let levels = le_u32(four) ^ 0x8080_8080;
            out[c * CHUNK + 4 * r..][..4].copy_from_slice(&levels.to_le_bytes());
        }
    }

    #[inline(always)]
    unsafe fn chunks(p: *const u8) -> [__m512i; CHUNKS] {
        let mut chunks = [_mm512_setzero_si512(); CHUNKS];
        for (c, chunk) in chunks.iter_mut().enumerate() {
            *chunk = _mm512_loadu_si512(p.add(c * CHUNK).cast());
        }
        chunks
    }
}

/// The levels w + 16 (0..32) as nibbles and fifth bits: byte j of nibble vector c holds byte
/// j of chunk c (low nibble) and of chunk c + 4 (high nibble); bit j of the 64-bit word c of
/// the fifth bits is the fifth bit of byte j of chunk c.
struct FiveBits;

/// Where the fifth bits of a [`FiveBits`] panel block begin.
const FIFTH_BITS: usize = CHUNKS / 2 * CHUNK;

impl PanelFormat for FiveBits {
    const OFFSET: i32 = 16;
    const LEVEL_BYTES: usize = FIFTH_BITS + CHUNKS * 8;

    fn place(w: &[i8; QK], r: usize, out: &mut [u8]) {
        // Four elements of row r at a time: one u32 of levels per chunk.
        for (c, four) in w.chunks_exact(4).enumerate() {
            let signed = le_u32(four);
            // w + 16 in each byte: for w in −16..16, its low five bits with bit 4 flipped.
            let levels = (signed & 0x1F1F_1F1F) ^ 0x1010_1010;
            let nibbles = (levels & 0x0F0F_0F0F) << (4 * (c / 4));
            let at = c % 4 * CHUNK + 4 * r;
            let old = u32::from_le_bytes(out[at..at + 4].try_into().expect("4"));
            out[at..at + 4].copy_from_slice(&(old | nibbles).to_le_bytes());
            // The fifth bits (bit 4 of each byte) gathered into one nibble: the product
            // puts bit 8i at bit 21 + i, and no two of its partial products meet.
            let fifth = (((levels >> 4) & 0x0101_0101).wrapping_mul(0x0020_4081) >> 21) & 0x0F;
            out[FIFTH_BITS + 8 * c + r / 2] |= (fifth as u8) << (4 * (r % 2));
        }
    }

    #[inline(always)]
    unsafe fn chunks(p: *const u8) -> [__m512i; CHUNKS] {
        let low = _mm512_set1_epi8(0x0F);
        let sixteen = _mm512_set1_epi8(16);
        let mut chunks = [_mm512_setzero_si512(); CHUNKS];
        for (c, chunk) in chunks.iter_mut().enumerate() {
            let nibbles = _mm512_loadu_si512(p.add(c % 4 * CHUNK).cast());
            let nibbles = if c < 4 {
                nibbles
            } else {
                _mm512_srli_epi16::<4>(nibbles)
            };
            let fifth = p.add(FIFTH_BITS + 8 * c).cast::<u64>().read_unaligned();
            let level = _mm512_and_si512(nibbles, low);
            *chunk = _mm512_mask_add_epi8(level, fifth, level, sixteen);
        }
        chunks
    }
}

/// Four signed values as the bytes of a little-endian u32.
fn le_u32(four: &[i8]) -> u32 {
    u32::from_le_bytes([four[0] as u8, four[1] as u8, four[2] as u8, four[3] as u8])
}

/// The byte layout of a panel block of format `F`: its levels, then the rows' f16 scales.
struct Panel<F>(F);

impl<F: PanelFormat> Panel<F> {
    const SCALES: usize = F::LEVEL_BYTES;
    const BLOCK_BYTES: usize = F::LEVEL_BYTES + 2 * ROWS;
}

/// Per block, the values as they are, the scale as f32 and −F::OFFSET·Σy.
fn pack_act<F: PanelFormat>(act: &[u8], out: &mut [u8]) {
    for (block, o) in act
        .chunks_exact(Q8_0_BYTES)
        .zip(out.chunks_exact_mut(ACT_BLOCK_BYTES))
    {
        o[..QK].copy_from_slice(&block[2..]);
        let d = crate::fp::read_f16(block, 0);
        o[ACT_SCALE..ACT_CORRECTION].copy_from_slice(&d.to_le_bytes());
        let sum: i32 = block[2..].iter().map(|&q| i32::from(q as i8)).sum();
        o[ACT_CORRECTION..].copy_from_slice(&(-F::OFFSET * sum).to_le_bytes());
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pack_panel<W: SignedPair, F: PanelFormat>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let block_bytes = Panel::<F>::BLOCK_BYTES;
    let out = &mut out[..n_blocks * block_bytes];
    out.fill(0);
    let row_bytes = n_blocks * W::BYTES;
    for (r, row) in rows.chunks_exact(row_bytes.max(1)).take(ROWS).enumerate() {
        for b in (0..n_blocks).step_by(2) {
            // Two blocks at a time; the last odd block paired with zeros (two blocks of the
            // widest type).
            let n = (n_blocks - b).min(2);
            let mut pair = [0u8; 2 * Q8_0_BYTES];
            pair[..n * W::BYTES].copy_from_slice(&row[b * W::BYTES..(b + n) * W::BYTES]);
            let mut values = [0i8; 2 * QK];
            // SAFETY: `pair` holds two whole blocks.
            _mm512_storeu_si512(values.as_mut_ptr().cast(), W::values(pair.as_ptr()));
            for h in 0..n {
                let block = &mut out[(b + h) * block_bytes..][..block_bytes];
                let w = values[h * QK..][..QK].try_into().expect("32 values");
                F::place(w, r, &mut block[..F::LEVEL_BYTES]);
                // Every signed type's block starts with its f16 scale.
                block[Panel::<F>::SCALES + 2 * r..][..2]
                    .copy_from_slice(&pair[h * W::BYTES..][..2]);
            }
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn run<F: PanelFormat>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<Panel<F>, AVX512_GROUP>(panel, acts, out)
}

/// The four bytes at `p` in every 32-bit lane.
#[inline(always)]
unsafe fn bytes4(p: *const u8) -> __m512i {
    _mm512_set1_epi32(p.cast::<i32>().read_unaligned())
}

impl<F: PanelFormat> PanelBlocks for Panel<F> {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = Self::BLOCK_BYTES;
    type Acc = __m512;
    const ACT_BYTES: usize = ACT_BLOCK_BYTES;

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m512; N],
    ) {
        let w = F::chunks(panel);
        let d_w = _mm512_cvtph_ps(_mm256_loadu_si256(panel.add(Self::SCALES).cast()));
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
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn store(sums: __m512, out: &mut [f32]) {
        _mm512_storeu_ps(out[..ROWS].as_mut_ptr(), sums);
    }
}
