//! AVX-512 (F/BW/VL/DQ) kernels, and the same with AVX-512 VNNI.
//!
//! A super-block is unpacked into four 512-bit vectors of unsigned levels in element order
//! (64 elements each, so one vector spans two 32-element or four 16-element sub-blocks) and
//! four vectors of i16 sub-block scales laid out to match. Per activation row, `maddubs`
//! multiplies levels by Q8_K quants into 16-bit pair sums (no saturation: levels are at
//! most 127, quants at most 127 in magnitude; IQ4_XS's signed levels are kept as magnitudes,
//! their signs moved onto each row's quants), and the scales weight those into i32 lanes:
//! `madd_epi16` + `add_epi32`, or with VNNI one `dpwssd`. The lanes go to f32 once per
//! super-block with one FMA by `d·d_act`.
//!
//! The four vectors of levels come from broadcasting 32 source bytes to both 256-bit halves
//! and shifting each half by its own amount (`srlv_epi16`), so no lane crossing is needed.

use super::driver::{self, BlockKernel};
use super::layout::*;
use super::q8_k::{self, BSUMS, QS};
use super::x86::*;
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{DotFn, DotManyFn, KernelFns};
use crate::GgmlType;
use std::arch::x86_64::*;

pub(super) fn kernel(weight_type: GgmlType, vnni: bool) -> Option<KernelFns> {
    macro_rules! pick {
        ($k:ident) => {
            if vnni {
                (
                    dot_vnni::<$k<true>> as DotFn,
                    dot_many_vnni::<$k<true>> as DotManyFn,
                )
            } else {
                (
                    dot::<$k<false>> as DotFn,
                    dot_many::<$k<false>> as DotManyFn,
                )
            }
        };
    }
    let (dot, dot_many) = match weight_type {
        GgmlType::Q2_K => pick!(Q2K),
        GgmlType::Q3_K => pick!(Q3K),
        GgmlType::Q4_K => pick!(Q4K),
        GgmlType::Q5_K => pick!(Q5K),
        GgmlType::Q6_K => pick!(Q6K),
        GgmlType::IQ4_XS => pick!(Iq4Xs),
        _ => return None,
    };
    Some(KernelFns {
        act_type: GgmlType::Q8_K,
        quantize: q8_k::quantize_avx512,
        dot,
        dot_many,
    })
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dot_avx512<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    driver::dot::<K>(w, act)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dot_many_avx512<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    driver::dot_many::<K>(w, acts, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_avx512_vnni<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    driver::dot::<K>(w, act)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn dot_many_avx512_vnni<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    driver::dot_many::<K>(w, acts, out)
}

fn dot<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Avx512`, which `DotKernel`
    // hands out only after `Isa::available()` found AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C.
    unsafe { dot_avx512::<K>(w, act) }
}

fn dot_many<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot`.
    unsafe { dot_many_avx512::<K>(w, acts, out) }
}

fn dot_vnni<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Avx512Vnni`, which `DotKernel`
    // hands out only after `Isa::available()` found AVX-512 VNNI besides the features of
    // `Isa::Avx512`.
    unsafe { dot_avx512_vnni::<K>(w, act) }
}

fn dot_many_vnni<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot_vnni`.
    unsafe { dot_many_avx512_vnni::<K>(w, acts, out) }
}

// ------------------------------------------------------------------------------ helpers

#[inline(always)]
unsafe fn load512(b: &[u8], at: usize) -> __m512i {
    _mm512_loadu_si512(b[at..at + 64].as_ptr().cast())
}

/// 32 bytes at `b[at..]` in both 256-bit halves.
#[inline(always)]
unsafe fn broadcast256(b: &[u8], at: usize) -> __m512i {
    _mm512_broadcast_i64x4(load256(b, at))
}

/// A vector whose low 256 bits hold `low` and high 256 bits hold `high` in every i16 lane:
/// per-half shift counts for `srlv_epi16`.
#[inline(always)]
unsafe fn halves16(low: i16, high: i16) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_set1_epi16(low), _mm256_set1_epi16(high))
}

/// A vector whose low 256 bits hold `low` and high 256 bits hold `high` in every byte.
#[inline(always)]
unsafe fn halves8(low: u8, high: u8) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_set1_epi8(low as i8), _mm256_set1_epi8(high as i8))
}

/// Each i32 lane `v` (a 16-bit value) as the i16 pair `(v, v)`.
#[inline(always)]
unsafe fn i16_pairs(v: __m512i) -> __m512i {
    _mm512_or_si512(
        _mm512_and_si512(v, _mm512_set1_epi32(0xffff)),
        _mm512_slli_epi32::<16>(v),
    )
}

/// The i16-pair scales for level vector `v` when sub-blocks are 64 / `per_vector` elements
/// long: i32 lane l gets the pair of sub-block `per_vector·v + l·per_vector/16`.
#[inline(always)]
unsafe fn scales_for(pairs: __m512i, v: usize, per_vector: usize) -> __m512i {
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let shift = (16 / per_vector).trailing_zeros();
    let idx = _mm512_add_epi32(
        _mm512_srlv_epi32(lane, _mm512_set1_epi32(shift as i32)),
        _mm512_set1_epi32((per_vector * v) as i32),
    );
    _mm512_permutexvar_epi32(idx, pairs)
}

/// `scales_for` of the four level vectors.
#[inline(always)]
unsafe fn scales_for_all(pairs: __m512i, per_vector: usize) -> [__m512i; 4] {
    let mut scales = [pairs; 4];
    for (v, s) in scales.iter_mut().enumerate() {
        *s = scales_for(pairs, v, per_vector);
    }
    scales
}

/// `acc + Σ pairs(p16 · scales)`: the 16-bit pair sums weighted by their sub-block scales.
#[inline(always)]
unsafe fn add_scaled<const VNNI: bool>(acc: __m512i, p16: __m512i, scales: __m512i) -> __m512i {
    if VNNI {
        _mm512_dpwssd_epi32(acc, p16, scales)
    } else {
        _mm512_add_epi32(acc, _mm512_madd_epi16(p16, scales))
    }
}

/// Σ over the four level vectors of `maddubs(levels, quants)` weighted by `scales`, in two
/// independent chains.
#[inline(always)]
unsafe fn scaled_dot<const VNNI: bool>(
    levels: &[__m512i; 4],
    scales: &[__m512i; 4],
    act: &[u8],
) -> __m512i {
    let zero = _mm512_setzero_si512();
    let mut even = zero;
    let mut odd = zero;
    for v in (0..4).step_by(2) {
        let p = _mm512_maddubs_epi16(levels[v], load512(act, QS + 64 * v));
        even = add_scaled::<VNNI>(even, p, scales[v]);
        let p = _mm512_maddubs_epi16(levels[v + 1], load512(act, QS + 64 * (v + 1)));
        odd = add_scaled::<VNNI>(odd, p, scales[v + 1]);
    }
    _mm512_add_epi32(even, odd)
}

/// The activation block's 16 bsums.
#[inline(always)]
unsafe fn bsums(act: &[u8]) -> __m256i {
    load256(act, BSUMS)
}

// ---------------------------------------------------------------------------------- Q4_K

struct Q4K<const VNNI: bool>;

struct Q4KBlock {
    levels: [__m512i; 4],
    scales: [__m512i; 4],
    /// The i16 pair `(m_k, m_k)` in i32 lane k, to `madd` with the bsums.
    mins: __m256i,
    d: f32,
    dmin: f32,
}

/// Splits the 128 bytes of Q4_K (and Q5_K) nibbles at `b[at..]` into element order: vector
/// v is nibble 0 (low half) and nibble 1 (high half) of bytes 32v..32v+32.
#[inline(always)]
pub(super) unsafe fn k4_nibbles(b: &[u8], at: usize) -> [__m512i; 4] {
    let shift = halves16(0, 4);
    let mask = _mm512_set1_epi8(0xf);
    let mut levels = [mask; 4];
    for (v, level) in levels.iter_mut().enumerate() {
        *level = _mm512_and_si512(_mm512_srlv_epi16(broadcast256(b, at + 32 * v), shift), mask);
    }
    levels
}

/// The scales (as `scales_for` vectors) and mins (as `madd` pairs) of Q4_K and Q5_K.
#[inline(always)]
unsafe fn k4_scales(b: &[u8]) -> ([__m512i; 4], __m256i) {
    let pairs = i16_pairs(_mm512_cvtepu8_epi32(k4_scales_mins_vec(b, q4_k::SCALES)));
    (
        scales_for_all(pairs, 2),
        _mm512_extracti64x4_epi64::<1>(pairs),
    )
}

impl<const VNNI: bool> BlockKernel for Q4K<VNNI> {
    const BLOCK_BYTES: usize = Q4_K_BYTES;
    type Unpacked = Q4KBlock;
    type Acc = (__m512, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        (_mm512_setzero_ps(), _mm256_setzero_ps())
    }

    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Q4KBlock {
        let (scales, mins) = k4_scales(b);
        Q4KBlock {
            levels: k4_nibbles(b, q4_k::QS),
            scales,
            mins,
            d: f16_at(b, q4_k::D),
            dmin: f16_at(b, q4_k::D + 2),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Q4KBlock, act: &[u8], acc: &mut Self::Acc) {
        k4_accumulate::<VNNI>(&w.levels, &w.scales, w.mins, w.d, w.dmin, act, acc)
    }

    #[inline(always)]
    unsafe fn finish(acc: Self::Acc) -> f32 {
        _mm512_reduce_add_ps(acc.0) + hsum_ps256(acc.1)
    }
}

/// Q4_K and Q5_K: `d·Σ scaled products − dmin·Σ m_k·bsums`.
#[inline(always)]
unsafe fn k4_accumulate<const VNNI: bool>(
    levels: &[__m512i; 4],
    scales: &[__m512i; 4],
    mins: __m256i,
    d: f32,
    dmin: f32,
    act: &[u8],
    acc: &mut (__m512, __m256),
) {
    let dy = q8_k::d(act);
    let isum = scaled_dot::<VNNI>(levels, scales, act);
    acc.0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * d), acc.0);
    let msum = _mm256_madd_epi16(bsums(act), mins);
    acc.1 = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(msum),
        _mm256_set1_ps(-(dy * dmin)),
        acc.1,
    );
}

// ---------------------------------------------------------------------------------- Q6_K

/// The 256 unsigned levels (0..64) of a Q6_K block in element order, 64 per vector. Half
/// h's 64 `ql` bytes give, masked, elements 128h..128h+64 (vector 2h) and, shifted,
/// 128h+64..128h+128 (vector 2h + 1); its 32 `qh` bytes, broadcast and shifted by 2k per
/// 256-bit half, give the top 2 bits.
#[inline(always)]
pub(super) unsafe fn q6_k_levels(b: &[u8]) -> [__m512i; 4] {
    let low4 = _mm512_set1_epi8(0xf);
    let top2 = _mm512_set1_epi8(0x30);
    let mut levels = [_mm512_setzero_si512(); 4];
    for h in 0..2 {
        let ql = load512(b, q6_k::QL + 64 * h);
        let qh = broadcast256(b, q6_k::QH + 32 * h);
        for (half, (low, shift)) in [
            (_mm512_and_si512(ql, low4), halves16(0, 2)),
            (
                _mm512_and_si512(_mm512_srli_epi16::<4>(ql), low4),
                halves16(4, 6),
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let high = _mm512_slli_epi16::<4>(_mm512_srlv_epi16(qh, shift));
            levels[2 * h + half] = _mm512_or_si512(low, _mm512_and_si512(high, top2));
        }
    }
    levels
}

struct Q6K<const VNNI: bool>;

struct Q6KBlock {
    levels: [__m512i; 4],
    scales: [__m512i; 4],
    /// The 16 scales as i16, to `madd` with the bsums for the −32 offset.
    offset_scales: __m256i,
    d: f32,
}

impl<const VNNI: bool> BlockKernel for Q6K<VNNI> {
    const BLOCK_BYTES: usize = Q6_K_BYTES;
    type Unpacked = Q6KBlock;
    type Acc = __m512;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Q6KBlock {
        let raw = load128(b, q6_k::SCALES);
        let pairs = i16_pairs(_mm512_cvtepi8_epi32(raw));
        Q6KBlock {
            levels: q6_k_levels(b),
            scales: scales_for_all(pairs, 4),
            offset_scales: _mm256_cvtepi8_epi16(raw),
            d: f16_at(b, q6_k::D),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Q6KBlock, act: &[u8], acc: &mut __m512) {
        let isum = scaled_dot::<VNNI>(&w.levels, &w.scales, act);
        let offset = _mm256_slli_epi32::<5>(_mm256_madd_epi16(bsums(act), w.offset_scales));
        let isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(offset));
        let dy = q8_k::d(act);
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * w.d), *acc);
    }

    #[inline(always)]
    unsafe fn finish(acc: __m512) -> f32 {
        _mm512_reduce_add_ps(acc)
    }
}

// ---------------------------------------------------------------------------------- Q5_K

/// The 256 levels (0..32) of a Q5_K block in element order, 64 per vector: as Q4_K's, plus
/// 16 where bit 2v (low half) or 2v+1 (high half) of `qh` is set.
#[inline(always)]
pub(super) unsafe fn q5_k_levels(b: &[u8]) -> [__m512i; 4] {
    let mut levels = k4_nibbles(b, q5_k::QS);
    let qh = broadcast256(b, q5_k::QH);
    for (v, level) in levels.iter_mut().enumerate() {
        let high = _mm512_test_epi8_mask(qh, halves8(1 << (2 * v), 2 << (2 * v)));
        *level = _mm512_mask_add_epi8(*level, high, *level, _mm512_set1_epi8(16));
    }
    levels
}

struct Q5K<const VNNI: bool>;

impl<const VNNI: bool> BlockKernel for Q5K<VNNI> {
    const BLOCK_BYTES: usize = Q5_K_BYTES;
    type Unpacked = Q4KBlock;
    type Acc = (__m512, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        (_mm512_setzero_ps(), _mm256_setzero_ps())
    }

    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Q4KBlock {
        let (scales, mins) = k4_scales(b);
        Q4KBlock {
            levels: q5_k_levels(b),
            scales,
            mins,
            d: f16_at(b, q4_k::D),
            dmin: f16_at(b, q4_k::D + 2),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Q4KBlock, act: &[u8], acc: &mut Self::Acc) {
        k4_accumulate::<VNNI>(&w.levels, &w.scales, w.mins, w.d, w.dmin, act, acc)
    }

    #[inline(always)]
    unsafe fn finish(acc: Self::Acc) -> f32 {
        _mm512_reduce_add_ps(acc.0) + hsum_ps256(acc.1)
    }
}

// -------------------------------------------------------------------------- Q2_K and Q3_K

/// The low 2 bits of Q2_K and Q3_K from the 64 bytes at `b[at..]`: vector v (elements
/// 64v..64v+64) is bits 4(v%2).. (low half) and 4(v%2)+2.. (high half) of bytes
/// 32(v/2)..32(v/2)+32.
#[inline(always)]
unsafe fn two_bit_levels(b: &[u8], at: usize) -> [__m512i; 4] {
    let mask = _mm512_set1_epi8(3);
    let mut levels = [mask; 4];
    for (v, level) in levels.iter_mut().enumerate() {
        let shift = (4 * (v % 2)) as i16;
        let bytes = broadcast256(b, at + 32 * (v / 2));
        *level = _mm512_and_si512(_mm512_srlv_epi16(bytes, halves16(shift, shift + 2)), mask);
    }
    levels
}

/// Types with 16 sub-blocks, one i16 scale each and an offset applied through the bsums
/// (Q3_K: levels stored plus 4) or mins (Q2_K).
struct Sixteen {
    levels: [__m512i; 4],
    scales: [__m512i; 4],
    /// The 16 scales (Q3_K) or mins (Q2_K) as i16, to `madd` with the bsums.
    bsum_weights: __m256i,
    d: f32,
    dmin: f32,
}

/// `scales_for` vectors of 16 scales given as i32 lanes.
#[inline(always)]
unsafe fn sixteen_scales(scales32: __m512i) -> [__m512i; 4] {
    scales_for_all(i16_pairs(scales32), 4)
}

struct Q2K<const VNNI: bool>;

impl<const VNNI: bool> BlockKernel for Q2K<VNNI> {
    const BLOCK_BYTES: usize = Q2_K_BYTES;
    type Unpacked = Sixteen;
    type Acc = (__m512, __m256);

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        (_mm512_setzero_ps(), _mm256_setzero_ps())
    }

    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Sixteen {
        let raw = load128(b, q2_k::SCALES);
        let scales32 = _mm512_and_si512(_mm512_cvtepu8_epi32(raw), _mm512_set1_epi32(0xf));
        let mins16 = _mm256_srli_epi16::<4>(_mm256_cvtepu8_epi16(raw));
        Sixteen {
            levels: two_bit_levels(b, q2_k::QS),
            scales: sixteen_scales(scales32),
            bsum_weights: mins16,
            d: f16_at(b, q2_k::D),
            dmin: f16_at(b, q2_k::DMIN),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Sixteen, act: &[u8], acc: &mut Self::Acc) {
        let dy = q8_k::d(act);
        let isum = scaled_dot::<VNNI>(&w.levels, &w.scales, act);
        acc.0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * w.d), acc.0);
        let msum = _mm256_madd_epi16(bsums(act), w.bsum_weights);
        acc.1 = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(msum),
            _mm256_set1_ps(-(dy * w.dmin)),
            acc.1,
        );
    }

    #[inline(always)]
    unsafe fn finish(acc: Self::Acc) -> f32 {
        _mm512_reduce_add_ps(acc.0) + hsum_ps256(acc.1)
    }
}

struct Q3K<const VNNI: bool>;

impl<const VNNI: bool> BlockKernel for Q3K<VNNI> {
    const BLOCK_BYTES: usize = Q3_K_BYTES;
    type Unpacked = Sixteen;
    type Acc = __m512;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    /// Two-bit levels plus 4 where the `hmask` bit of the element (bit 4h+s of byte m for
    /// element 128h+32s+m) is set: levels 0..8 are the stored values plus 4.
    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Sixteen {
        let mut levels = two_bit_levels(b, q3_k::QS);
        let hmask = broadcast256(b, q3_k::HMASK);
        for (v, level) in levels.iter_mut().enumerate() {
            let bit = 2 * v;
            let high = _mm512_test_epi8_mask(hmask, halves8(1 << bit, 2 << bit));
            *level = _mm512_mask_add_epi8(*level, high, *level, _mm512_set1_epi8(4));
        }
        let scales = _mm_sub_epi8(q3_k_scales_vec(b, q3_k::SCALES), _mm_set1_epi8(32));
        Sixteen {
            levels,
            scales: sixteen_scales(_mm512_cvtepi8_epi32(scales)),
            bsum_weights: _mm256_cvtepi8_epi16(scales),
            d: f16_at(b, q3_k::D),
            dmin: 0.0,
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Sixteen, act: &[u8], acc: &mut __m512) {
        let isum = scaled_dot::<VNNI>(&w.levels, &w.scales, act);
        let offset = _mm256_slli_epi32::<2>(_mm256_madd_epi16(bsums(act), w.bsum_weights));
        let isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(offset));
        let dy = q8_k::d(act);
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * w.d), *acc);
    }

    #[inline(always)]
    unsafe fn finish(acc: __m512) -> f32 {
        _mm512_reduce_add_ps(acc)
    }
}

// -------------------------------------------------------------------------------- IQ4_XS

struct Iq4Xs<const VNNI: bool>;

/// IQ4_XS values are signed, which `maddubs` does not take on both sides: the block keeps
/// their magnitudes, and each row's quants are negated where the value is negative.
struct Iq4XsBlock {
    magnitudes: [__m512i; 4],
    negative: [__mmask64; 4],
    scales: [__m512i; 4],
    d: f32,
}

impl<const VNNI: bool> BlockKernel for Iq4Xs<VNNI> {
    const BLOCK_BYTES: usize = IQ4_XS_BYTES;
    type Unpacked = Iq4XsBlock;
    type Acc = __m512;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    /// Vector v holds sub-blocks 2v and 2v+1; sub-block j's 16 bytes give its elements
    /// 0..16 (low nibbles) and 16..32 (high nibbles), so each 16-byte half of the 32 source
    /// bytes goes to two 128-bit lanes, shifted by 0 and 4.
    #[inline(always)]
    unsafe fn unpack(b: &[u8]) -> Iq4XsBlock {
        let table = _mm512_broadcast_i32x4(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        let shift = _mm512_setr_epi64(
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
            0,
            0,
            0x0004_0004_0004_0004,
            0x0004_0004_0004_0004,
        );
        let mask = _mm512_set1_epi8(0xf);
        let mut magnitudes = [mask; 4];
        let mut negative = [0; 4];
        for v in 0..4 {
            let bytes = broadcast256(b, iq4_xs::QS + 32 * v);
            let lanes = _mm512_shuffle_i64x2::<0b01_01_00_00>(bytes, bytes);
            let index = _mm512_and_si512(_mm512_srlv_epi16(lanes, shift), mask);
            let values = _mm512_shuffle_epi8(table, index);
            magnitudes[v] = _mm512_abs_epi8(values);
            negative[v] = _mm512_movepi8_mask(values);
        }
        let scales32 = _mm512_zextsi256_si512(iq4_xs_scales_vec(b));
        Iq4XsBlock {
            magnitudes,
            negative,
            scales: scales_for_all(i16_pairs(scales32), 2),
            d: f16_at(b, iq4_xs::D),
        }
    }

    #[inline(always)]
    unsafe fn accumulate(w: &Iq4XsBlock, act: &[u8], acc: &mut __m512) {
        let zero = _mm512_setzero_si512();
        let mut isum = zero;
        for v in 0..4 {
            let quants = load512(act, QS + 64 * v);
            let signed = _mm512_mask_sub_epi8(quants, w.negative[v], zero, quants);
            let p = _mm512_maddubs_epi16(w.magnitudes[v], signed);
            isum = add_scaled::<VNNI>(isum, p, w.scales[v]);
        }
        let dy = q8_k::d(act);
        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(dy * w.d), *acc);
    }

    #[inline(always)]
    unsafe fn finish(acc: __m512) -> f32 {
        _mm512_reduce_add_ps(acc)
    }
}
