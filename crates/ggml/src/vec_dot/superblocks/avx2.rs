//! AVX2 kernels (with FMA and F16C).
//!
//! As the AVX-512 ones with 256-bit vectors: a super-block is unpacked into eight vectors
//! of unsigned levels in element order (32 elements each: one 32-element or two 16-element
//! sub-blocks) and eight vectors of i16 sub-block scales to match; per activation row,
//! `maddubs` makes 16-bit pair sums of levels times Q8_K quants and `madd_epi16` weights them
//! by the scales into i32 lanes, which go to f32 once per super-block. Sixteen vectors do not
//! fit in AVX2's sixteen registers next to the row sums, so the compiler keeps part of the
//! unpacked block on the stack, where it is read as a memory operand at no extra cost.

use super::driver::{self, BlockKernel};
use super::layout::*;
use super::q8_k::{self, BSUMS, QS};
use super::x86::*;
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{DotFn, DotManyFn, KernelFns};
use crate::GgmlType;
use std::arch::x86_64::*;

pub(super) fn kernel(weight_type: GgmlType) -> Option<KernelFns> {
    let (dot, dot_many): (DotFn, DotManyFn) = match weight_type {
        GgmlType::Q2_K => (dot::<Q2K>, dot_many::<Q2K>),
        GgmlType::Q3_K => (dot::<Q3K>, dot_many::<Q3K>),
        GgmlType::Q4_K => (dot::<Q4K>, dot_many::<Q4K>),
        GgmlType::Q5_K => (dot::<Q5K>, dot_many::<Q5K>),
        GgmlType::Q6_K => (dot::<Q6K>, dot_many::<Q6K>),
        GgmlType::IQ4_XS => (dot::<Iq4Xs>, dot_many::<Iq4Xs>),
        _ => return None,
    };
    Some(KernelFns {
        act_type: GgmlType::Q8_K,
        quantize: q8_k::quantize_avx2,
        dot,
        dot_many,
    })
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    driver::dot::<K>(w, act)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_many_avx2<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    driver::dot_many::<K>(w, acts, out)
}

fn dot<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Avx2`, which `DotKernel` hands
    // out only after `Isa::available()` found AVX2, FMA and F16C.
    unsafe { dot_avx2::<K>(w, act) }
}

fn dot_many<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot`.
    unsafe { dot_many_avx2::<K>(w, acts, out) }
}

// ------------------------------------------------------------------------------ helpers

/// From eight i16 scales in both 128-bit halves of `scales`: scale `low` in i16 lanes
/// 0..8 and scale `high` in lanes 8..16, matching a level vector whose first and second 16
/// elements belong to those sub-blocks (`maddubs` pairs element 2i with 2i+1 in lane i).
#[inline(always)]
unsafe fn pick_scales(scales: __m256i, low: usize, high: usize) -> __m256i {
    let byte_pair = |s: usize| ((2 * s) | ((2 * s + 1) << 8)) as i16;
    let pick = _mm256_setr_m128i(
        _mm_set1_epi16(byte_pair(low)),
        _mm_set1_epi16(byte_pair(high)),
    );
    _mm256_shuffle_epi8(scales, pick)
}

/// The scale vectors of the types with 16 sub-blocks of 16 elements, from their scales as
/// 16 i16: level vector v spans sub-blocks 2v and 2v+1.
#[inline(always)]
unsafe fn sixteen_scales(scales16: __m256i) -> [__m256i; 8] {
    let halves = [
        _mm256_permute4x64_epi64::<0b01_00_01_00>(scales16),
        _mm256_permute4x64_epi64::<0b11_10_11_10>(scales16),
    ];
    let mut scales = [scales16; 8];
    for (v, s) in scales.iter_mut().enumerate() {
        *s = pick_scales(halves[v / 4], 2 * (v % 4), 2 * (v % 4) + 1);
    }
    scales
}

/// Σ over the eight level vectors of `maddubs(levels, quants)` weighted by `scales`, in two
/// independent chains.
#[inline(always)]
unsafe fn scaled_dot(levels: &[__m256i; 8], scales: &[__m256i; 8], act: &[u8]) -> __m256i {
    let mut even = _mm256_setzero_si256();
    let mut odd = _mm256_setzero_si256();
    for v in (0..8).step_by(2) {
        let p = _mm256_maddubs_epi16(levels[v], load256(act, QS + 32 * v));
        even = _mm256_add_epi32(even, _mm256_madd_epi16(p, scales[v]));
        let p = _mm256_maddubs_epi16(levels[v + 1], load256(act, QS + 32 * (v + 1)));
        odd = _mm256_add_epi32(odd, _mm256_madd_epi16(p, scales[v + 1]));
    }
    _mm256_add_epi32(even, odd)
}

// ---------------------------------------------------------------------------------- Q4_K

struct Q4K;

impl Q4K {
    /// Q4_K and Q5_K with their 128 nibble bytes at `b[qs..]`: vector 2p is the low nibbles
    /// of bytes 32p..32p+32, vector 2p+1 their high nibbles.
    #[inline(always)]
    unsafe fn unpack_at(b: &[u8], qs: usize) -> Q4KBlock {
        let mask = _mm256_set1_epi8(0xf);
        let mut levels = [mask; 8];
        for p in 0..4 {
            let x = load256(b, qs + 32 * p);
            levels[2 * p] = _mm256_and_si256(x, mask);
            levels[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16::<4>(x), mask);
        }
        let scales_mins = k4_scales_mins_vec(b, q4_k::SCALES);
        let all = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scales_mins));
        let mut scales = [all; 8];
        for (v, s) in scales.iter_mut().enumerate() {
            *s = pick_scales(all, v, v);
        }
        Q4KBlock {
            levels,
            scales,
            mins: i16_pairs256(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(
                scales_mins,
                scales_mins,
            ))),
            d: f16_at(b, q4_k::D),
            dmin: f16_at(b, q4_k::D + 2),
        }
    }
}

struct Q4KBlock {
    levels: [__m256i; 8],
    scales: [__m256i; 8],
    /// The i16 pair `(m_k, m_k)` in i32 lane k, to `madd` with the bsums.
    mins: __m256i,
    d: f32,
    dmin: f32,
}

impl BlockKernel for Q4K {
    const BLOCK_BYTES: usize = Q4_K_BYTES;
    type Unpacked = Q4KBlock;
    type Acc = (__m256, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        (_mm256_setzero_ps(), _mm256_setzero_ps())
    }

    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Q4KBlock {
        Q4K::unpack_at(b, q4_k::QS)
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Q4KBlock, act: &[u8], acc: &mut Self::Acc) {
        let dy = q8_k::d(act);
        let isum = scaled_dot(&w.levels, &w.scales, act);
        acc.0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * w.d), acc.0);
        let msum = _mm256_madd_epi16(load256(act, BSUMS), w.mins);
        acc.1 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(msum),
            _mm256_set1_ps(-(dy * w.dmin)),
            acc.1,
        );
    }

    #[inline(always)]
    unsafe fn finish(acc: Self::Acc) -> f32 {
        hsum_ps256(acc.0) + hsum_ps256(acc.1)
    }
}

// ---------------------------------------------------------------------------------- Q6_K

struct Q6K;

struct Q6KBlock {
    levels: [__m256i; 8],
    scales: [__m256i; 8],
    /// The 16 scales as i16, to `madd` with the bsums for the −32 offset.
    offset_scales: __m256i,
    d: f32,
}

impl BlockKernel for Q6K {
    const BLOCK_BYTES: usize = Q6_K_BYTES;
    type Unpacked = Q6KBlock;
    type Acc = __m256;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    /// Vector 4h+k (elements 128h+32k..) is nibble k/2 of `ql[64h + 32(k%2)..]` with bits
    /// 2k..2k+2 of `qh[32h..]` on top.
    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Q6KBlock {
        let low4 = _mm256_set1_epi8(0xf);
        let top2 = _mm256_set1_epi8(0x30);
        let mut levels = [low4; 8];
        for h in 0..2 {
            let a = load256(b, q6_k::QL + 64 * h);
            let c = load256(b, q6_k::QL + 64 * h + 32);
            let qh = load256(b, q6_k::QH + 32 * h);
            let tops = [
                _mm256_slli_epi16::<4>(qh),
                _mm256_slli_epi16::<2>(qh),
                qh,
                _mm256_srli_epi16::<2>(qh),
            ];
            let lows = [
                _mm256_and_si256(a, low4),
                _mm256_and_si256(c, low4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(a), low4),
                _mm256_and_si256(_mm256_srli_epi16::<4>(c), low4),
            ];
            for k in 0..4 {
                levels[4 * h + k] = _mm256_or_si256(lows[k], _mm256_and_si256(tops[k], top2));
            }
        }
        let scales16 = _mm256_cvtepi8_epi16(load128(b, q6_k::SCALES));
        Q6KBlock {
            levels,
            scales: sixteen_scales(scales16),
            offset_scales: scales16,
            d: f16_at(b, q6_k::D),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Q6KBlock, act: &[u8], acc: &mut __m256) {
        let isum = scaled_dot(&w.levels, &w.scales, act);
        let offset = _mm256_madd_epi16(load256(act, BSUMS), w.offset_scales);
        let isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<5>(offset));
        let dy = q8_k::d(act);
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * w.d), *acc);
    }

    #[inline(always)]
    unsafe fn finish(acc: __m256) -> f32 {
        hsum_ps256(acc)
    }
}

// ---------------------------------------------------------------------------------- Q5_K

struct Q5K;

impl BlockKernel for Q5K {
    const BLOCK_BYTES: usize = Q5_K_BYTES;
    type Unpacked = Q4KBlock;
    type Acc = (__m256, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        Q4K::zero()
    }

    /// As Q4_K, plus bit v of `qh` moved to bit 4 of vector v.
    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Q4KBlock {
        let mut w = Q4K::unpack_at(b, q5_k::QS);
        let qh = load256(b, q5_k::QH);
        let fifth = _mm256_set1_epi8(16);
        for (v, level) in w.levels.iter_mut().enumerate() {
            *level = _mm256_or_si256(*level, _mm256_and_si256(move_bit(qh, v, 4), fifth));
        }
        w
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Q4KBlock, act: &[u8], acc: &mut Self::Acc) {
        Q4K::accumulate(w, act, acc)
    }

    #[inline(always)]
    unsafe fn finish(acc: Self::Acc) -> f32 {
        Q4K::finish(acc)
    }
}

/// `x` with the bits of each byte shifted so that bit `from` (0..8) lands on bit `to` (other
/// bits are garbage for the caller to mask off). The callers' loops are unrolled, so the
/// `match` folds to one shift by an immediate, which is cheaper than a shift by a register
/// count on some CPUs.
#[inline(always)]
unsafe fn move_bit(x: __m256i, from: usize, to: usize) -> __m256i {
    match to as isize - from as isize {
        -7 => _mm256_srli_epi16::<7>(x),
        -6 => _mm256_srli_epi16::<6>(x),
        -5 => _mm256_srli_epi16::<5>(x),
        -4 => _mm256_srli_epi16::<4>(x),
        -3 => _mm256_srli_epi16::<3>(x),
        -2 => _mm256_srli_epi16::<2>(x),
        -1 => _mm256_srli_epi16::<1>(x),
        0 => x,
        1 => _mm256_slli_epi16::<1>(x),
        2 => _mm256_slli_epi16::<2>(x),
        3 => _mm256_slli_epi16::<3>(x),
        4 => _mm256_slli_epi16::<4>(x),
        shift => _mm256_sll_epi16(x, _mm_cvtsi32_si128(shift as i32)),
    }
}

// -------------------------------------------------------------------------- Q2_K and Q3_K

/// The low 2 bits of Q2_K and Q3_K from the 64 bytes at `b[at..]`: vector 4h+s (elements
/// 128h+32s..) is bits 2s.. of bytes 32h..32h+32.
#[inline(always)]
unsafe fn two_bit_levels(b: &[u8], at: usize) -> [__m256i; 8] {
    let mask = _mm256_set1_epi8(3);
    let mut levels = [mask; 8];
    for h in 0..2 {
        let bytes = load256(b, at + 32 * h);
        for s in 0..4 {
            levels[4 * h + s] = _mm256_and_si256(move_bit(bytes, 2 * s, 0), mask);
        }
    }
    levels
}

/// Types with 16 sub-blocks, one i16 scale each and an offset applied through the bsums
/// (Q3_K: levels stored plus 4) or mins (Q2_K).
struct Sixteen {
    levels: [__m256i; 8],
    scales: [__m256i; 8],
    /// The 16 scales (Q3_K) or mins (Q2_K) as i16, to `madd` with the bsums.
    bsum_weights: __m256i,
    d: f32,
    dmin: f32,
}

struct Q2K;

impl BlockKernel for Q2K {
    const BLOCK_BYTES: usize = Q2_K_BYTES;
    type Unpacked = Sixteen;
    type Acc = (__m256, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        (_mm256_setzero_ps(), _mm256_setzero_ps())
    }

    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Sixteen {
        let raw = _mm256_cvtepu8_epi16(load128(b, q2_k::SCALES));
        Sixteen {
            levels: two_bit_levels(b, q2_k::QS),
            scales: sixteen_scales(_mm256_and_si256(raw, _mm256_set1_epi16(0xf))),
            bsum_weights: _mm256_srli_epi16::<4>(raw),
            d: f16_at(b, q2_k::D),
            dmin: f16_at(b, q2_k::DMIN),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Sixteen, act: &[u8], acc: &mut Self::Acc) {
        let dy = q8_k::d(act);
        let isum = scaled_dot(&w.levels, &w.scales, act);
        acc.0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * w.d), acc.0);
        let msum = _mm256_madd_epi16(load256(act, BSUMS), w.bsum_weights);
        acc.1 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(msum),
            _mm256_set1_ps(-(dy * w.dmin)),
            acc.1,
        );
    }

    #[inline(always)]
    unsafe fn finish(acc: Self::Acc) -> f32 {
        hsum_ps256(acc.0) + hsum_ps256(acc.1)
    }
}

struct Q3K;

impl BlockKernel for Q3K {
    const BLOCK_BYTES: usize = Q3_K_BYTES;
    type Unpacked = Sixteen;
    type Acc = __m256;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    /// Two-bit levels plus 4 where the element's `hmask` bit (bit v of byte m for element
    /// 32v+m) is set: levels 0..8 are the stored values plus 4.
    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Sixteen {
        let mut levels = two_bit_levels(b, q3_k::QS);
        let hmask = load256(b, q3_k::HMASK);
        let third = _mm256_set1_epi8(4);
        for (v, level) in levels.iter_mut().enumerate() {
            *level = _mm256_or_si256(*level, _mm256_and_si256(move_bit(hmask, v, 2), third));
        }
        let scales = _mm256_sub_epi16(
            _mm256_cvtepu8_epi16(q3_k_scales_vec(b, q3_k::SCALES)),
            _mm256_set1_epi16(32),
        );
        Sixteen {
            levels,
            scales: sixteen_scales(scales),
            bsum_weights: scales,
            d: f16_at(b, q3_k::D),
            dmin: 0.0,
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Sixteen, act: &[u8], acc: &mut __m256) {
        let isum = scaled_dot(&w.levels, &w.scales, act);
        let offset = _mm256_madd_epi16(load256(act, BSUMS), w.bsum_weights);
        let isum = _mm256_sub_epi32(isum, _mm256_slli_epi32::<2>(offset));
        let dy = q8_k::d(act);
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * w.d), *acc);
    }

    #[inline(always)]
    unsafe fn finish(acc: __m256) -> f32 {
        hsum_ps256(acc)
    }
}

// -------------------------------------------------------------------------------- IQ4_XS

struct Iq4Xs;

/// IQ4_XS values are signed, which `maddubs` does not take on both sides: the block keeps
/// their magnitudes and the values themselves, whose signs `sign_epi8` moves onto each
/// row's quants.
struct Iq4XsBlock {
    magnitudes: [__m256i; 8],
    values: [__m256i; 8],
    scales: [__m256i; 8],
    d: f32,
}

impl BlockKernel for Iq4Xs {
    const BLOCK_BYTES: usize = IQ4_XS_BYTES;
    type Unpacked = Iq4XsBlock;
    type Acc = __m256;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    /// Vector j is sub-block j: the low nibbles of its 16 bytes, then the high nibbles.
    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Iq4XsBlock {
        let table = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        let mask = _mm256_set1_epi8(0xf);
        let mut values = [mask; 8];
        let mut magnitudes = [mask; 8];
        for j in 0..8 {
            let bytes = load128(b, iq4_xs::QS + 16 * j);
            let nibbles =
                _mm256_and_si256(_mm256_setr_m128i(bytes, _mm_srli_epi16::<4>(bytes)), mask);
            values[j] = _mm256_shuffle_epi8(table, nibbles);
            magnitudes[j] = _mm256_abs_epi8(values[j]);
        }
        let pairs = i16_pairs256(iq4_xs_scales_vec(b));
        let mut scales = [pairs; 8];
        for (j, s) in scales.iter_mut().enumerate() {
            *s = _mm256_permutevar8x32_epi32(pairs, _mm256_set1_epi32(j as i32));
        }
        Iq4XsBlock {
            magnitudes,
            values,
            scales,
            d: f16_at(b, iq4_xs::D),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Iq4XsBlock, act: &[u8], acc: &mut __m256) {
        let mut even = _mm256_setzero_si256();
        let mut odd = _mm256_setzero_si256();
        for j in (0..8).step_by(2) {
            for (sum, j) in [(&mut even, j), (&mut odd, j + 1)] {
                let signed = _mm256_sign_epi8(load256(act, QS + 32 * j), w.values[j]);
                let p = _mm256_maddubs_epi16(w.magnitudes[j], signed);
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p, w.scales[j]));
            }
        }
        let dy = q8_k::d(act);
        let isum = _mm256_add_epi32(even, odd);
        *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(dy * w.d), *acc);
    }

    #[inline(always)]
    unsafe fn finish(acc: __m256) -> f32 {
        hsum_ps256(acc)
    }
}
