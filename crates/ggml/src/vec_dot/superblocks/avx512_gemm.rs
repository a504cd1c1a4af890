//! The AVX-512 VNNI GEMM ([`crate::vec_dot::gemm`]) of Q4_K, Q5_K and Q6_K against Q8_K
//! activations.
//!
//! A panel holds eight weight rows, as the blocks32 GEMM's do. Per super-block it stores the
//! rows' 256 levels unpacked to bytes in 32 chunks of 64 bytes, chunk c holding elements
//! 8c..8c + 8 of every row in turn. Broadcasting 8 activation bytes against chunk c makes
//! `vpdpbusd`'s i32 lanes 2r and 2r + 1 partial sums of row r, four elements each, so every
//! lane stays inside one sub-block (32 elements, Q4_K and Q5_K) or scale group (16, Q6_K).
//! A lane's sum over its sub-block (Q5_K: over half of one) fits in i16, so one `vpdpwssd`
//! against the panel's sub-block scales (row r's in the low i16 of lanes 2r and 2r + 1, the
//! high i16 zero) scales it for all eight rows exactly, in integers. One conversion and one
//! FMA per super-block apply the f32 scales; the lanes of row r are added at the end.
//!
//! - Q4_K: levels 0..16 are the unsigned operand and the Q8_K quants the signed one, as they
//!   are: a lane's sum over a sub-block is at most 16·15·128 in magnitude. The mins go
//!   through the activation's 32-element block sums, `vpdpwssd` with the panel's mins. Q5_K
//!   is the same with levels 0..32 (at most 8·31·128 per half sub-block).
//! - Q6_K: 16 elements · 63 · 127 would not fit in i16, but with the level offset applied
//!   (q − 32, signed) it does, so the panel stores q − 32 and the activations are stored plus
//!   128 to be the unsigned operand: Σ(y + 128)·w = Σy·w + 128·Σw, and each group's lane sums
//!   start from the panel's −128·Σw for that lane and group (Q8_K quants lie in −127..=127,
//!   so a lane's 8 products stay within 8·127·32 of zero).
//!
//! Both operands of every product are exact, and so are the integer sums: outputs differ
//! from `DotKernel::dot` only in how the per-lane f32 terms add up.

use std::arch::x86_64::*;

use super::avx512::{k4_nibbles, q5_k_levels, q6_k_levels};
use super::layout::{q4_k, q6_k, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use super::q8_k::{self, Q8_K_BYTES};
use super::x86::{f16_at, k4_scales_mins_vec};
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::panel_walk::{
    self, bytes8, store_lane_pairs, PanelBlocks, AVX512_GROUP, CHUNK, ROWS,
};
use crate::GgmlType;

/// Bytes of a panel super-block's values: 256 elements of 8 rows.
const VALUES: usize = 32 * CHUNK;
/// Elements of a super-block.
const QK_K: usize = 256;

pub(super) fn gemm(weight_type: GgmlType) -> Option<GemmFns> {
    match weight_type {
        GgmlType::Q4_K => Some(fns::<K4<false>>()),
        GgmlType::Q5_K => Some(fns::<K4<true>>()),
        GgmlType::Q6_K => Some(fns::<Q6K>()),
        _ => None,
    }
}

/// How one weight type is packed; its blocks are walked as [`PanelBlocks`]. All functions
/// are `#[inline(always)]` so that they compile into the `#[target_feature]` functions below.
trait PanelFormat: PanelBlocks {
    /// Bytes of one weight super-block.
    const WEIGHT_BYTES: usize;

    /// Places `block` (one weight super-block) as row `r` of `out` (one panel super-block).
    unsafe fn place(block: &[u8], r: usize, out: &mut [u8]);
    /// Completes `out` once all its rows are placed.
    unsafe fn finish(out: &mut [u8]);
    /// Packs one Q8_K block.
    fn pack_act(block: &[u8], out: &mut [u8]);
}

fn fns<K: PanelFormat>() -> GemmFns {
    // SAFETY (both closures): `gemm` is only reached through `DotKernel` for
    // Isa::Avx512Vnni, which it hands out only after `Isa::available()` confirmed at run time
    // that this CPU has AVX-512 F/BW/VL/DQ, VNNI, AVX2, FMA and F16C.
    GemmFns {
        panel_rows: ROWS,
        panel_bytes: |n_blocks| n_blocks * K::PANEL_BYTES,
        pack_panel: |rows, n_blocks, out| unsafe { pack_panel::<K>(rows, n_blocks, out) },
        act_bytes: |n_blocks| n_blocks * K::ACT_BYTES,
        pack_act: pack_act::<K>,
        run: |panel, acts, out| unsafe { run::<K>(panel, acts, out) },
    }
}

fn pack_act<K: PanelFormat>(act: &[u8], out: &mut [u8]) {
    for (block, o) in act
        .chunks_exact(Q8_K_BYTES)
        .zip(out.chunks_exact_mut(K::ACT_BYTES))
    {
        K::pack_act(block, o);
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pack_panel<K: PanelFormat>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let out = &mut out[..n_blocks * K::PANEL_BYTES];
    let row_bytes = n_blocks * K::WEIGHT_BYTES;
    let mut panel_rows: [&[u8]; ROWS] = [&[]; ROWS];
    let mut n_rows = 0;
    for (slot, row) in panel_rows
        .iter_mut()
        .zip(rows.chunks_exact(row_bytes.max(1)))
    {
        *slot = row;
        n_rows += 1;
    }
    if n_rows < ROWS {
        // Missing rows are zeros; every byte of the present rows is written below.
        out.fill(0);
    }
    for (b, block) in out.chunks_exact_mut(K::PANEL_BYTES).enumerate() {
        for (r, row) in panel_rows[..n_rows].iter().enumerate() {
            K::place(&row[b * K::WEIGHT_BYTES..][..K::WEIGHT_BYTES], r, block);
        }
        K::finish(block);
    }
}

/// Writes the 256 levels in `levels` (element order) as row `r` of the panel super-block's
/// value chunks.
#[inline(always)]
unsafe fn place_values(levels: [__m512i; 4], r: usize, out: &mut [u8]) {
    let mut pieces = [0u64; 32];
    for (v, level) in levels.into_iter().enumerate() {
        _mm512_storeu_si512(pieces[8 * v..].as_mut_ptr().cast(), level);
    }
    for (chunk, piece) in out[..VALUES].chunks_exact_mut(CHUNK).zip(pieces) {
        chunk[8 * r..8 * r + 8].copy_from_slice(&piece.to_le_bytes());
    }
}

/// Writes `v` to f32 lanes 2r and 2r + 1 of the 64 bytes at `out[at..]`.
#[inline(always)]
fn place_lanes(out: &mut [u8], at: usize, r: usize, v: f32) {
    let lanes = &mut out[at + 8 * r..at + 8 * r + 8];
    lanes[..4].copy_from_slice(&v.to_le_bytes());
    lanes[4..].copy_from_slice(&v.to_le_bytes());
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn run<K: PanelFormat>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<K, AVX512_GROUP>(panel, acts, out)
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p.cast())
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

// -------------------------------------------------------------------------- Q4_K and Q5_K

/// Q4_K, or with `FIVE_BITS` Q5_K: the same scales, mins and panel layout, levels 0..32.
/// A lane's sum over a Q5_K sub-block (16 products) could leave i16, its sum over half of
/// one (8 products, at most 8·31·128) cannot, so Q5_K scales halves.
struct K4<const FIVE_BITS: bool>;

/// Where a Q4_K or Q5_K panel super-block keeps, after its values: per sub-block j, the 16 bytes
/// whose bytes 2r and 2r + 1 are row r's scale; the mins as i16 pairs, lane 2r + h holding
/// (m_4h, m_4h+1) in the first vector and (m_4h+2, m_4h+3) in the second; `d` and `dmin` in
/// f32 lanes 2r and 2r + 1.
mod q4_k_panel {
    pub const SCALES: usize = super::VALUES;
    pub const MINS: usize = SCALES + 8 * 16;
    pub const D: usize = MINS + 2 * 64;
    pub const DMIN: usize = D + 64;
    pub const BYTES: usize = DMIN + 64;
}

/// A packed Q4_K or Q5_K activation super-block: the 256 quants as they are, the 8 sums of 32 in
/// the order the mins are broadcast in (sub-blocks 0, 1, 4, 5, then 2, 3, 6, 7), and `d`.
mod q4_k_act {
    pub const SUMS: usize = super::QK_K;
    pub const D: usize = SUMS + 16;
    pub const BYTES: usize = super::QK_K + 32;
}

impl<const FIVE_BITS: bool> PanelFormat for K4<FIVE_BITS> {
    const WEIGHT_BYTES: usize = if FIVE_BITS { Q5_K_BYTES } else { Q4_K_BYTES };

    #[inline(always)]
    unsafe fn place(block: &[u8], r: usize, out: &mut [u8]) {
        use q4_k_panel::*;
        let levels = if FIVE_BITS {
            q5_k_levels(block)
        } else {
            k4_nibbles(block, q4_k::QS)
        };
        place_values(levels, r, out);
        let mut scales_mins = [0u8; 16];
        _mm_storeu_si128(
            scales_mins.as_mut_ptr().cast(),
            k4_scales_mins_vec(block, q4_k::SCALES),
        );
        let (scales, mins) = scales_mins.split_at(8);
        for (j, &sc) in scales.iter().enumerate() {
            out[SCALES + 16 * j + 2 * r..][..2].copy_from_slice(&[sc, sc]);
        }
        for (v, first) in [0, 2].into_iter().enumerate() {
            let m = |j: usize| u16::from(mins[j]).to_le_bytes();
            let lanes = [m(first), m(first + 1), m(first + 4), m(first + 5)];
            out[MINS + 64 * v + 8 * r..][..8].copy_from_slice(&lanes.concat());
        }
        place_lanes(out, D, r, f16_at(block, q4_k::D));
        place_lanes(out, DMIN, r, f16_at(block, q4_k::D + 2));
    }

    #[inline(always)]
    unsafe fn finish(_: &mut [u8]) {}

    fn pack_act(block: &[u8], out: &mut [u8]) {
        use q4_k_act::*;
        out[..QK_K].copy_from_slice(q8_k::qs(block));
        for (i, j) in [0, 1, 4, 5, 2, 3, 6, 7].into_iter().enumerate() {
            let sum = q8_k::bsum(block, 2 * j) + q8_k::bsum(block, 2 * j + 1);
            // At most 32·128 in magnitude.
            out[SUMS + 2 * i..][..2].copy_from_slice(&(sum as i16).to_le_bytes());
        }
        out[D..D + 4].copy_from_slice(&q8_k::d(block).to_le_bytes());
    }
}

impl<const FIVE_BITS: bool> PanelBlocks for K4<FIVE_BITS> {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = q4_k_panel::BYTES;
    type Acc = __m512;
    const ACT_BYTES: usize = q4_k_act::BYTES;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn store(sums: __m512, out: &mut [f32]) {
        store_lane_pairs(sums, out)
    }

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m512; N],
    ) {
        use q4_k_panel::*;
        let zero = _mm512_setzero_si512();
        let mut isum = [zero; N];
        for j in 0..8 {
            let w = panel.add(4 * j * CHUNK);
            let (w0, w1) = (load(w), load(w.add(CHUNK)));
            let (w2, w3) = (load(w.add(2 * CHUNK)), load(w.add(3 * CHUNK)));
            let scales = _mm512_cvtepu8_epi32(_mm_loadu_si128(panel.add(SCALES + 16 * j).cast()));
            // Indexed so that the loop unrolls and the sums stay in registers.
            for i in 0..N {
                let y = acts[i].add(32 * j);
                let low = _mm512_dpbusd_epi32(zero, w0, bytes8(y));
                let low = _mm512_dpbusd_epi32(low, w1, bytes8(y.add(8)));
                if FIVE_BITS {
                    let high = _mm512_dpbusd_epi32(zero, w2, bytes8(y.add(16)));
                    let high = _mm512_dpbusd_epi32(high, w3, bytes8(y.add(24)));
                    isum[i] = _mm512_dpwssd_epi32(isum[i], low, scales);
                    isum[i] = _mm512_dpwssd_epi32(isum[i], high, scales);
                } else {
                    let s = _mm512_dpbusd_epi32(low, w2, bytes8(y.add(16)));
                    let s = _mm512_dpbusd_epi32(s, w3, bytes8(y.add(24)));
                    isum[i] = _mm512_dpwssd_epi32(isum[i], s, scales);
                }
            }
        }
        let mins = [load(panel.add(MINS)), load(panel.add(MINS + 64))];
        let d = _mm512_loadu_ps(panel.add(D).cast());
        let dmin = _mm512_loadu_ps(panel.add(DMIN).cast());
        for i in 0..N {
            let sums = acts[i].add(q4_k_act::SUMS);
            let msum = _mm512_dpwssd_epi32(zero, mins[0], bytes8(sums));
            let msum = _mm512_dpwssd_epi32(msum, mins[1], bytes8(sums.add(8)));
            let d_a = _mm512_set1_ps(f32_at(acts[i].add(q4_k_act::D)));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, d_a), acc[i]);
            acc[i] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, d_a), acc[i]);
        }
    }
}

// ---------------------------------------------------------------------------------- Q6_K

struct Q6K;

/// Where a Q6_K panel super-block keeps, after its values (q − 32): per scale group g (two
/// chunks), the i32 lanes' starting sums −128·Σw; per group the 32 bytes whose i16 lane
/// pairs are (scale of the lane's row, 0); `d` in f32 lanes 2r and 2r + 1.
mod q6_k_panel {
    pub const CORRECTIONS: usize = super::VALUES;
    pub const SCALES: usize = CORRECTIONS + 16 * 64;
    pub const D: usize = SCALES + 16 * 32;
    pub const BYTES: usize = D + 64;
}

/// A packed Q6_K activation super-block: the 256 quants plus 128, and `d`.
mod q6_k_act {
    pub const D: usize = super::QK_K;
    pub const BYTES: usize = super::QK_K + 8;
}

impl PanelFormat for Q6K {
    const WEIGHT_BYTES: usize = Q6_K_BYTES;

    #[inline(always)]
    unsafe fn place(block: &[u8], r: usize, out: &mut [u8]) {
        use q6_k_panel::*;
        let mut levels = q6_k_levels(block);
        for level in &mut levels {
            *level = _mm512_sub_epi8(*level, _mm512_set1_epi8(32));
        }
        place_values(levels, r, out);
        let scales = &block[q6_k::SCALES..q6_k::SCALES + 16];
        for (g, &sc) in scales.iter().enumerate() {
            out[SCALES + 32 * g + 4 * r..][..4].copy_from_slice(&[sc, 0, sc, 0]);
        }
        place_lanes(out, D, r, f16_at(block, q6_k::D));
    }

    #[inline(always)]
    unsafe fn finish(out: &mut [u8]) {
        use q6_k_panel::*;
        let (values, rest) = out.split_at_mut(VALUES);
        let offset = _mm512_set1_epi8(-128);
        for (g, group) in values.chunks_exact(2 * CHUNK).enumerate() {
            let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, load(group.as_ptr()));
            let sum = _mm512_dpbusd_epi32(sum, offset, load(group[CHUNK..].as_ptr()));
            let correction = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
            let at = CORRECTIONS - VALUES + 64 * g;
            _mm512_storeu_si512(rest[at..at + 64].as_mut_ptr().cast(), correction);
        }
    }

    fn pack_act(block: &[u8], out: &mut [u8]) {
        use q6_k_act::*;
        for (o, &q) in out[..QK_K].iter_mut().zip(q8_k::qs(block)) {
            *o = q ^ 0x80;
        }
        out[D..D + 4].copy_from_slice(&q8_k::d(block).to_le_bytes());
    }
}

impl PanelBlocks for Q6K {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = q6_k_panel::BYTES;
    type Acc = __m512;
    const ACT_BYTES: usize = q6_k_act::BYTES;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn store(sums: __m512, out: &mut [f32]) {
        store_lane_pairs(sums, out)
    }

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m512; N],
    ) {
        use q6_k_panel::*;
        let mut isum = [_mm512_setzero_si512(); N];
        for g in 0..16 {
            let w = panel.add(2 * g * CHUNK);
            let (w0, w1) = (load(w), load(w.add(CHUNK)));
            let correction = load(panel.add(CORRECTIONS + 64 * g));
            let scales =
                _mm512_cvtepi8_epi16(_mm256_loadu_si256(panel.add(SCALES + 32 * g).cast()));
            for i in 0..N {
                let y = acts[i].add(16 * g);
                let s = _mm512_dpbusd_epi32(correction, bytes8(y), w0);
                let s = _mm512_dpbusd_epi32(s, bytes8(y.add(8)), w1);
                isum[i] = _mm512_dpwssd_epi32(isum[i], s, scales);
            }
        }
        let d = _mm512_loadu_ps(panel.add(D).cast());
        for i in 0..N {
            let d_a = _mm512_set1_ps(f32_at(acts[i].add(q6_k_act::D)));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, d_a), acc[i]);
        }
    }
}
