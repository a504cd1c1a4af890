//! The AVX2 GEMM ([`crate::vec_dot::gemm`]) of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS against
//! Q8_K activations, for the CPUs without VNNI (and those with AVX-512 but not VNNI).
//!
//! A panel holds eight weight rows, one i32 lane of a 256-bit register each. Per super-block
//! it stores the rows' 256 levels as the scalar kernel unpacks them (offsets applied: Q3_K's
//! −4, Q6_K's −32), as signed bytes in 64 chunks of 32 bytes, chunk c holding elements
//! 4c..4c + 4 of every row in turn. Broadcasting 4 activation bytes against chunk c multiplies
//! them with every row's at once.
//!
//! `vpmaddubsw` multiplies unsigned by signed bytes, adding each pair of products into an i16
//! lane. The activations plus 128 (1..=255) are the unsigned operand and the levels the signed
//! one: Σ(y + 128)·q = Σy·q + 128·Σq, so each panel super-block carries, per row, the i32
//! starting value −128·Σⱼ scaleⱼ·Σq over sub-block j. The levels are small, so the pairs of a
//! few chunks add up in i16 ([`Format::CHUNKS_PER_SUM`], all within one sub-block), and one
//! `vpmaddwd` against the panel's sub-block scales (row r's in both i16 halves of lane r)
//! scales them for all eight rows exactly, in integers. The mins go through the activation's
//! sub-block sums, `vpmaddwd` with the panel's mins in pairs. One conversion and one FMA per
//! super-block (two with mins) apply the f32 scales.
//!
//! IQ4_XS's levels (−127..=113) are too large for that: a pair of products with activations
//! plus 128 reaches 2·255·127, past the i16 bound. Its activations are packed as they are and
//! its levels multiplied as magnitudes, `vpsignb` moving each level's sign onto the activation
//! byte it meets, as ggml's IQ4_XS kernels do: a pair is at most 2·127·127 (Q8_K quants are
//! within ±127), and needs no correction. It costs one `vpsignb` per chunk and activation row,
//! and a `vpmaddwd` per chunk instead of per few chunks.
//!
//! With AVX-VNNI ([`crate::Isa::Avx2Vnni`]) the same panels and activations meet in
//! `vpdpbusd`, which adds four products into an i32 lane without saturating: one instruction
//! per chunk, and one `vpmulld` by the sub-block scales per sub-block.
//!
//! Both operands of every product are exact, and so are the integer sums: outputs differ
//! from [`crate::DotKernel::dot`] only in how the per-lane f32 terms add up.

use std::arch::x86_64::*;

use super::gemm_unpacked::{unpacked, Unpacked};
use super::layout::{IQ4_XS_BYTES, Q2_K_BYTES, Q3_K_BYTES, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use super::q8_k::{self, Q8_K_BYTES};
use super::scalar;
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::panel_walk::{self, PanelBlocks};
use crate::{GgmlType, QK_K};

/// Weight rows per panel: one i32 lane each fills a 256-bit register.
const ROWS: usize = 8;
/// Chunks of a super-block (four elements of every row each), and bytes of one.
const CHUNKS: usize = QK_K / 4;
const CHUNK: usize = 4 * ROWS;
/// Bytes of a panel super-block's values.
const VALUES: usize = CHUNKS * CHUNK;
/// Activation rows walked together: their sums fit the 16 registers beside a chunk.
const GROUP: usize = 4;

/// The GEMM of `weight_type`; with `vnni`, the one that multiplies with AVX-VNNI.
pub(super) fn gemm(weight_type: GgmlType, vnni: bool) -> Option<GemmFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q2_K => fns::<Q2K>(vnni),
        T::Q3_K => fns::<Q3K>(vnni),
        T::Q4_K => fns::<Q4K>(vnni),
        T::Q5_K => fns::<Q5K>(vnni),
        T::Q6_K => fns::<Q6K>(vnni),
        T::IQ4_XS => fns::<Iq4Xs>(vnni),
        _ => return None,
    })
}

fn fns<F: Format>(vnni: bool) -> GemmFns {
    // SAFETY (both closures): `gemm` is only reached through `DotKernel` for Isa::Avx2,
    // Isa::Avx512 and Isa::Avx512Vnni (without `vnni`) or Isa::Avx2Vnni (with it), which it
    // hands out only after `Isa::available()` confirmed at run time that this CPU has AVX2,
    // FMA and F16C, and for Isa::Avx2Vnni AVX-VNNI.
    GemmFns {
        panel_rows: ROWS,
        panel_bytes: |n_blocks| n_blocks * Layout::<F>::BLOCK_BYTES,
        pack_panel: pack_panel::<F>,
        act_bytes: |n_blocks| n_blocks * Layout::<F>::ACT_BYTES,
        pack_act: pack_act::<F>,
        run: if vnni {
            |panel, acts, out| unsafe { run_vnni::<F>(panel, acts, out) }
        } else {
            |panel, acts, out| unsafe { run::<F>(panel, acts, out) }
        },
    }
}

/// One weight type as this GEMM packs it.
trait Format {
    /// Bytes of one weight super-block.
    const WEIGHT_BYTES: usize;
    const SUB_BLOCKS: usize;
    /// Chunks whose pairs of products one i16 lane adds up: with activations up to 255, a
    /// pair is at most 510·max|q|, and their sum must stay below 2¹⁵. Divides the chunks of
    /// a sub-block.
    const CHUNKS_PER_SUM: usize;
    /// Whether the type has mins (applied through the activation's sub-block sums).
    const MINS: bool;
    /// Whether the levels are multiplied as magnitudes against activations that carry their
    /// signs (activations packed without the 128 offset, no corrections), for levels too large
    /// for the offset's pair bound.
    const SIGNED: bool = false;
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
    /// Levels 0..4; a sub-block is 4 chunks.
    const CHUNKS_PER_SUM: usize = 4;
    const MINS: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q2_k(block))
    }
}

impl Format for Q3K {
    const WEIGHT_BYTES: usize = Q3_K_BYTES;
    const SUB_BLOCKS: usize = 16;
    /// Levels −4..4; a sub-block is 4 chunks.
    const CHUNKS_PER_SUM: usize = 4;
    const MINS: bool = false;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q3_k(block))
    }
}

impl Format for Q4K {
    const WEIGHT_BYTES: usize = Q4_K_BYTES;
    const SUB_BLOCKS: usize = 8;
    /// Levels 0..16: 4·510·15 = 30600.
    const CHUNKS_PER_SUM: usize = 4;
    const MINS: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q4_k(block))
    }
}

impl Format for Q5K {
    const WEIGHT_BYTES: usize = Q5_K_BYTES;
    const SUB_BLOCKS: usize = 8;
    /// Levels 0..32: 2·510·31 = 31620.
    const CHUNKS_PER_SUM: usize = 2;
    const MINS: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q5_k(block))
    }
}

impl Format for Q6K {
    const WEIGHT_BYTES: usize = Q6_K_BYTES;
    const SUB_BLOCKS: usize = 16;
    /// Levels −32..32: 2·510·32 = 32640.
    const CHUNKS_PER_SUM: usize = 2;
    const MINS: bool = false;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_q6_k(block))
    }
}

impl Format for Iq4Xs {
    const WEIGHT_BYTES: usize = IQ4_XS_BYTES;
    const SUB_BLOCKS: usize = 8;
    /// Magnitudes up to 127 against activations within ±127: 2·127·127 = 32258.
    const CHUNKS_PER_SUM: usize = 1;
    const MINS: bool = false;
    const SIGNED: bool = true;
    fn unpack(block: &[u8]) -> Unpacked {
        unpacked(scalar::unpack_iq4_xs(block))
    }
}

/// The byte layout of a panel super-block of format `F`: its values; per sub-block the
/// 32 bytes whose i16 lane pairs are (scale, scale) of the lane's row; the rows' i32
/// corrections; with mins, per pair of sub-blocks (2i, 2i + 1) the 32 bytes whose lane r holds
/// row r's two mins as i16; `d` and, with mins, `dmin` as f32 lanes. And of a packed
/// activation super-block: the 256 quants plus 128 (as they are for [`Format::SIGNED`]), with
/// mins the sub-block sums as i16, `d`.
struct Layout<F>(F);

impl<F: Format> Layout<F> {
    const SCALES: usize = VALUES;
    const CORRECTIONS: usize = Self::SCALES + 32 * F::SUB_BLOCKS;
    const MINS: usize = Self::CORRECTIONS + 32;
    const D: usize = Self::MINS + if F::MINS { 16 * F::SUB_BLOCKS } else { 0 };
    const DMIN: usize = Self::D + 32;
    const BLOCK_BYTES: usize = Self::DMIN + if F::MINS { 32 } else { 0 };
    const ACT_SUMS: usize = QK_K;
    const ACT_D: usize = QK_K + if F::MINS { 2 * F::SUB_BLOCKS } else { 0 };
    const ACT_BYTES: usize = Self::ACT_D + 4;
}

fn pack_panel<F: Format>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let block_bytes = Layout::<F>::BLOCK_BYTES;
    let out = &mut out[..n_blocks * block_bytes];
    out.fill(0);
    let row_bytes = n_blocks * F::WEIGHT_BYTES;
    let sub_len = QK_K / F::SUB_BLOCKS;
    for (r, row) in rows.chunks_exact(row_bytes.max(1)).take(ROWS).enumerate() {
        for (block, o) in row
            .chunks_exact(F::WEIGHT_BYTES)
            .zip(out.chunks_exact_mut(block_bytes))
        {
            let u = F::unpack(block);
            for (c, four) in u.q.chunks_exact(4).enumerate() {
                let four = [four[0] as u8, four[1] as u8, four[2] as u8, four[3] as u8];
                o[c * CHUNK + 4 * r..][..4].copy_from_slice(&four);
            }
            let mut correction = 0i32;
            for (j, q) in u.q.chunks_exact(sub_len).enumerate() {
                let scale = u.scales[j];
                if !F::SIGNED {
                    correction -= 128 * scale * q.iter().map(|&q| i32::from(q)).sum::<i32>();
                }
                // Scales are 6-bit, or Q6_K's i8.
                let [lo, hi] = (scale as i16).to_le_bytes();
                o[Layout::<F>::SCALES + 32 * j + 4 * r..][..4].copy_from_slice(&[lo, hi, lo, hi]);
            }
            o[Layout::<F>::CORRECTIONS + 4 * r..][..4].copy_from_slice(&correction.to_le_bytes());
            if F::MINS {
                for (i, pair) in u.mins[..F::SUB_BLOCKS].chunks_exact(2).enumerate() {
                    let [a, b] = (pair[0] as i16).to_le_bytes();
                    let [c, d] = (pair[1] as i16).to_le_bytes();
                    o[Layout::<F>::MINS + 32 * i + 4 * r..][..4].copy_from_slice(&[a, b, c, d]);
                }
                o[Layout::<F>::DMIN + 4 * r..][..4].copy_from_slice(&u.dmin.to_le_bytes());
            }
            o[Layout::<F>::D + 4 * r..][..4].copy_from_slice(&u.d.to_le_bytes());
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
        let offset = if F::SIGNED { 0 } else { 0x80 };
        for (o, &q) in o[..QK_K].iter_mut().zip(q8_k::qs(block)) {
            *o = q ^ offset;
        }
        if F::MINS {
            for j in 0..F::SUB_BLOCKS {
                let sum: i32 = (j * sums_per_sub..(j + 1) * sums_per_sub)
                    .map(|k| q8_k::bsum(block, k))
                    .sum();
                // At most 32·127 in magnitude.
                o[Layout::<F>::ACT_SUMS + 2 * j..][..2]
                    .copy_from_slice(&(sum as i16).to_le_bytes());
            }
        }
        o[Layout::<F>::ACT_D..][..4].copy_from_slice(&q8_k::d(block).to_le_bytes());
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<F: Format>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<Panel<F, false>, GROUP>(panel, acts, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn run_vnni<F: Format>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<Panel<F, true>, GROUP>(panel, acts, out)
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast())
}

/// The four bytes at `p` in every 32-bit lane.
#[inline(always)]
unsafe fn bytes4(p: *const u8) -> __m256i {
    _mm256_set1_epi32(p.cast::<i32>().read_unaligned())
}

/// The panels of format `F` as the walk sees them; with `VNNI`, multiplied with AVX-VNNI.
struct Panel<F, const VNNI: bool>(F);

impl<F: Format, const VNNI: bool> PanelBlocks for Panel<F, VNNI> {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = Layout::<F>::BLOCK_BYTES;
    const ACT_BYTES: usize = Layout::<F>::ACT_BYTES;
    type Acc = __m256;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m256; N],
    ) {
        let sub_chunks = CHUNKS / F::SUB_BLOCKS;
        let mut isum = [load(panel.add(Layout::<F>::CORRECTIONS)); N];
        for j in (0..F::SUB_BLOCKS).filter(|_| VNNI) {
            // The scale of lane r's row, from its (scale, scale) pair.
            let scales = _mm256_srai_epi32::<16>(load(panel.add(Layout::<F>::SCALES + 32 * j)));
            let mut sums = [_mm256_setzero_si256(); N];
            for c in j * sub_chunks..(j + 1) * sub_chunks {
                let w = load(panel.add(c * CHUNK));
                let magnitudes = _mm256_abs_epi8(w);
                for i in 0..N {
                    let a = bytes4(acts[i].add(4 * c));
                    sums[i] = if F::SIGNED {
                        _mm256_dpbusd_avx_epi32(sums[i], magnitudes, _mm256_sign_epi8(a, w))
                    } else {
                        _mm256_dpbusd_avx_epi32(sums[i], a, w)
                    };
                }
            }
            for i in 0..N {
                isum[i] = _mm256_add_epi32(isum[i], _mm256_mullo_epi32(sums[i], scales));
            }
        }
        for first in (0..CHUNKS).step_by(F::CHUNKS_PER_SUM).filter(|_| !VNNI) {
            let scales = load(panel.add(Layout::<F>::SCALES + 32 * (first / sub_chunks)));
            let mut pairs = [_mm256_setzero_si256(); N];
            for c in first..first + F::CHUNKS_PER_SUM {
                let w = load(panel.add(c * CHUNK));
                let magnitudes = _mm256_abs_epi8(w);
                // Indexed so that the loops unroll and the sums stay in registers.
                for i in 0..N {
                    let a = bytes4(acts[i].add(4 * c));
                    let pair = if F::SIGNED {
                        _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(a, w))
                    } else {
                        _mm256_maddubs_epi16(a, w)
                    };
                    pairs[i] = _mm256_add_epi16(pairs[i], pair);
                }
            }
            for i in 0..N {
                isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(pairs[i], scales));
            }
        }
        let d = _mm256_loadu_ps(panel.add(Layout::<F>::D).cast());
        for i in 0..N {
            let d_a = _mm256_set1_ps(
                acts[i]
                    .add(Layout::<F>::ACT_D)
                    .cast::<f32>()
                    .read_unaligned(),
            );
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, d_a), acc[i]);
            if F::MINS {
                let mut msum = _mm256_setzero_si256();
                for k in 0..F::SUB_BLOCKS / 2 {
                    let mins = load(panel.add(Layout::<F>::MINS + 32 * k));
                    let sums = bytes4(acts[i].add(Layout::<F>::ACT_SUMS + 4 * k));
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins, sums));
                }
                let dmin = _mm256_loadu_ps(panel.add(Layout::<F>::DMIN).cast());
                acc[i] =
                    _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, d_a), acc[i]);
            }
        }
    }

    #[inline(always)]
    unsafe fn store(sums: __m256, out: &mut [f32]) {
        _mm256_storeu_ps(out[..ROWS].as_mut_ptr(), sums);
    }
}
