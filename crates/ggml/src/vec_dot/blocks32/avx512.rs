//! AVX-512 kernels ([`Isa::Avx512`] and [`Isa::Avx512Vnni`]): two 32-element blocks per
//! 512-bit register.
//!
//! Integer types: a pair of weight blocks is unpacked once to 64 bytes and used for up to
//! eight activation rows. The byte products are summed by `vpmaddubsw` + `vpmaddwd` (AVX-512BW) or
//! by `vpdpbusd` (VNNI), both unsigned × signed, so signed weights are split into magnitudes
//! and a sign mask that is applied to the activations (which lie in −127..=127, so negating
//! them never overflows). Each block's i32 lanes are converted once and scaled by
//! d_w·d_a with an FMA into per-row f32 accumulators; the f32 sums are reduced at the end.
//!
//! Float types: each row's products are summed by FMA into four accumulators of 16 f32
//! lanes, the weights converted to f32 once for up to four rows.
//!
//! `dot` is the one-row case of the same code, so `dot_many` agrees with it bit for bit.

use std::arch::x86_64::*;

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES,
};
use super::rows::{block_count, dot_many, RowKernel};
use super::{quantize, x86_quantize};
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{KernelFns, QuantizeFn};
use crate::GgmlType;

/// Rows of `dot_many` computed together with one unpacked weight pair: eight accumulators
/// and their temporaries fit in the 32 registers.
const ROWS: usize = 8;
/// Rows per float weight conversion: four rows of four accumulators fill half the registers.
const FLOAT_ROWS: usize = 4;

pub(super) fn kernel(weight_type: GgmlType, vnni: bool) -> Option<KernelFns> {
    use GgmlType as T;
    let q8_0: (GgmlType, QuantizeFn) = (T::Q8_0, x86_quantize::q8_0);
    let q8_1: (GgmlType, QuantizeFn) = (T::Q8_1, x86_quantize::q8_1);
    // The float types have no byte products: both instruction sets share one kernel.
    Some(match (weight_type, vnni) {
        (T::Q4_0, false) => fns::<Signed<Q4_0, Maddubs>, ROWS>(q8_0),
        (T::Q4_0, true) => fns::<Signed<Q4_0, Vnni>, ROWS>(q8_0),
        (T::Q5_0, false) => fns::<Signed<Q5_0, Maddubs>, ROWS>(q8_0),
        (T::Q5_0, true) => fns::<Signed<Q5_0, Vnni>, ROWS>(q8_0),
        (T::Q8_0, false) => fns::<Signed<Q8_0, Maddubs>, ROWS>(q8_0),
        (T::Q8_0, true) => fns::<Signed<Q8_0, Vnni>, ROWS>(q8_0),
        (T::IQ4_NL, false) => fns::<Signed<Iq4Nl, Maddubs>, ROWS>(q8_0),
        (T::IQ4_NL, true) => fns::<Signed<Iq4Nl, Vnni>, ROWS>(q8_0),
        (T::Q4_1, false) => fns::<Offset<Q4_1, Maddubs>, ROWS>(q8_1),
        (T::Q4_1, true) => fns::<Offset<Q4_1, Vnni>, ROWS>(q8_1),
        (T::Q5_1, false) => fns::<Offset<Q5_1, Maddubs>, ROWS>(q8_1),
        (T::Q5_1, true) => fns::<Offset<Q5_1, Vnni>, ROWS>(q8_1),
        (T::F16, _) => fns::<Float<F16Lanes>, FLOAT_ROWS>((T::F16, x86_quantize::f16)),
        (T::BF16, _) => fns::<Float<Bf16Lanes>, FLOAT_ROWS>((T::BF16, x86_quantize::bf16)),
        (T::F32, _) => fns::<Float<F32Lanes>, FLOAT_ROWS>((T::F32, quantize::f32)),
        _ => return None,
    })
}

/// A kernel of this file: whether it needs VNNI decides which entry points run it.
trait Avx512Kernel: RowKernel {
    const VNNI: bool;
}

fn fns<K: Avx512Kernel, const G: usize>((act_type, quantize): (GgmlType, QuantizeFn)) -> KernelFns {
    // SAFETY (all four closures): `kernel` is only reached through `DotKernel` for
    // Isa::Avx512 or Isa::Avx512Vnni, which it hands out only after `Isa::available()`
    // confirmed at run time that this CPU has AVX-512 F/BW/VL/DQ, AVX2, FMA and F16C, and for
    // Isa::Avx512Vnni also VNNI; `kernel` picks kernels with K::VNNI only for Avx512Vnni.
    if K::VNNI {
        KernelFns {
            act_type,
            quantize,
            dot: |w, act| unsafe { dot_vnni::<K>(w, act) },
            dot_many: |w, acts, out| unsafe { dot_many_vnni::<K, G>(w, acts, out) },
        }
    } else {
        KernelFns {
            act_type,
            quantize,
            dot: |w, act| unsafe { dot_avx512::<K>(w, act) },
            dot_many: |w, acts, out| unsafe { dot_many_avx512::<K, G>(w, acts, out) },
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dot_avx512<K: RowKernel>(w: &[u8], act: &[u8]) -> f32 {
    K::rows::<1>(w, [act])[0]
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn dot_many_avx512<K: RowKernel, const G: usize>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    dot_many::<K, G>(w, acts, out)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
unsafe fn dot_vnni<K: RowKernel>(w: &[u8], act: &[u8]) -> f32 {
    K::rows::<1>(w, [act])[0]
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,avx512vnni")]
unsafe fn dot_many_vnni<K: RowKernel, const G: usize>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    dot_many::<K, G>(w, acts, out)
}

/// How 64 unsigned × signed byte products are summed, four adjacent ones per i32 lane.
trait BytePairs {
    const VNNI: bool;
    unsafe fn dot(u: __m512i, s: __m512i) -> __m512i;
}

/// AVX-512BW: pairs into i16 (no saturation: |u| ≤ 128 and |s| ≤ 127), then pairs of those.
struct Maddubs;
struct Vnni;

impl BytePairs for Maddubs {
    const VNNI: bool = false;
    #[inline(always)]
    unsafe fn dot(u: __m512i, s: __m512i) -> __m512i {
        _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1))
    }
}

impl BytePairs for Vnni {
    const VNNI: bool = true;
    #[inline(always)]
    unsafe fn dot(u: __m512i, s: __m512i) -> __m512i {
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s)
    }
}

/// The 16-byte nibble arrays at `a` and `b` as 64 bytes: a's low nibbles, a's high nibbles,
/// b's low, b's high (elements 0..32 of each block, in order).
#[inline(always)]
unsafe fn nibbles_pair(a: *const u8, b: *const u8) -> __m512i {
    let x = _mm512_broadcast_i32x4(_mm_loadu_si128(a.cast()));
    let x = _mm512_mask_broadcast_i32x4(x, 0xFF00, _mm_loadu_si128(b.cast()));
    // Shift the second and fourth 128-bit lanes so that their high nibbles come down.
    let x = _mm512_srlv_epi64(x, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0));
    _mm512_and_si512(x, _mm512_set1_epi8(0x0F))
}

/// The 32 bytes at `a` and the 32 at `b`.
#[inline(always)]
unsafe fn bytes_pair(a: *const u8, b: *const u8) -> __m512i {
    let lo = _mm256_loadu_si256(a.cast());
    let hi = _mm256_loadu_si256(b.cast());
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi)
}

#[inline(always)]
unsafe fn u32_at(p: *const u8) -> u32 {
    u32::from_le(p.cast::<u32>().read_unaligned())
}

/// The two halves at `p` and `p + stride`, as f32 in lanes 0 and 1.
#[inline(always)]
unsafe fn f16_pair(p: *const u8, stride: usize) -> __m128 {
    let a = u32::from(u16::from_le(p.cast::<u16>().read_unaligned()));
    let b = u32::from(u16::from_le(p.add(stride).cast::<u16>().read_unaligned()));
    _mm_cvtph_ps(_mm_cvtsi32_si128((a | b << 16) as i32))
}

/// The two half pairs at `p` and `p + stride`, as f32 in lanes 0, 1 and 2, 3.
#[inline(always)]
unsafe fn f16_quad(p: *const u8, stride: usize) -> __m128 {
    let a = u32_at(p) as i32;
    let b = u32_at(p.add(stride)) as i32;
    _mm_cvtph_ps(_mm_setr_epi32(a, b, 0, 0))
}

/// Lanes 0..8 from lane `a` of `x`, lanes 8..16 from lane `b`.
#[inline(always)]
unsafe fn spread(x: __m128, a: i32, b: i32) -> __m512 {
    let idx = _mm512_setr_epi32(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
    _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(x))
}

/// A signed weight format, read two blocks (at `p` and `p + BYTES`) at a time.
pub(super) trait SignedPair: SignedBlocks {
    /// The 64 signed values.
    unsafe fn values(p: *const u8) -> __m512i;
}

impl SignedPair for Q4_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m512i {
        let q = nibbles_pair(p.add(2), p.add(Self::BYTES + 2));
        _mm512_sub_epi8(q, _mm512_set1_epi8(8))
    }
}

impl SignedPair for Q5_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m512i {
        let q = nibbles_pair(p.add(6), p.add(Self::BYTES + 6));
        let high = u64::from(u32_at(p.add(2))) | u64::from(u32_at(p.add(Self::BYTES + 2))) << 32;
        // (q | fifth bit << 4) − 16: q − 16 where the fifth bit is clear, q where it is set.
        _mm512_mask_sub_epi8(q, !high, q, _mm512_set1_epi8(16))
    }
}

impl SignedPair for Q8_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m512i {
        bytes_pair(p.add(2), p.add(Self::BYTES + 2))
    }
}

impl SignedPair for Iq4Nl {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m512i {
        let q = nibbles_pair(p.add(2), p.add(Self::BYTES + 2));
        let levels = _mm512_broadcast_i32x4(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        _mm512_shuffle_epi8(levels, q)
    }
}

/// Signed weights against Q8_0 activations.
struct Signed<W, P>(W, P);

impl<W: SignedPair, P: BytePairs> Signed<W, P> {
    /// Adds the pair of blocks at `w` (two weight blocks) and `acts[r]` (two Q8_0 blocks) to
    /// row r's accumulator.
    #[inline(always)]
    unsafe fn pair<const R: usize>(w: *const u8, acts: [*const u8; R], acc: &mut [__m512; R]) {
        let v = W::values(w);
        let magnitude = _mm512_abs_epi8(v);
        let negative = _mm512_movepi8_mask(v);
        let d = f16_pair(w, W::BYTES);
        // Indexed so that the loop unrolls and the accumulators stay in registers.
        for r in 0..R {
            let a = acts[r];
            let y = bytes_pair(a.add(2), a.add(Q8_0_BYTES + 2));
            let y = _mm512_mask_sub_epi8(y, negative, _mm512_setzero_si512(), y);
            let sums = _mm512_cvtepi32_ps(P::dot(magnitude, y));
            let scale = spread(_mm_mul_ps(d, f16_pair(a, Q8_0_BYTES)), 0, 1);
            acc[r] = _mm512_fmadd_ps(sums, scale, acc[r]);
        }
    }
}

/// Room for two blocks of any type of this family.
const PAIR_BYTES: usize = 2 * Q8_1_BYTES;

impl<W: SignedPair, P: BytePairs> Avx512Kernel for Signed<W, P> {
    const VNNI: bool = P::VNNI;
}

impl<W: SignedPair, P: BytePairs> RowKernel for Signed<W, P> {
    const W_BYTES: usize = W::BYTES;
    const A_BYTES: usize = Q8_0_BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let nb = block_count(w, W::BYTES, &acts, Q8_0_BYTES);
        let mut acc = [_mm512_setzero_ps(); R];
        for i in (0..nb & !1).step_by(2) {
            // SAFETY: blocks i and i + 1 lie within `w` and every row (i + 1 < nb).
            let a = acts.map(|a| a.as_ptr().add(i * Q8_0_BYTES));
            Self::pair(w.as_ptr().add(i * W::BYTES), a, &mut acc);
        }
        if nb % 2 == 1 {
            // The last block, paired with a zero block (scale 0, so it adds nothing).
            let i = nb - 1;
            let mut wp = [0u8; PAIR_BYTES];
            wp[..W::BYTES].copy_from_slice(&w[i * W::BYTES..nb * W::BYTES]);
            let mut ap = [[0u8; PAIR_BYTES]; R];
            for (buf, a) in ap.iter_mut().zip(acts) {
                buf[..Q8_0_BYTES].copy_from_slice(&a[i * Q8_0_BYTES..nb * Q8_0_BYTES]);
            }
            Self::pair(wp.as_ptr(), ap.each_ref().map(|b| b.as_ptr()), &mut acc);
        }
        acc.map(|a| _mm512_reduce_add_ps(a))
    }
}

/// An offset weight format, read two blocks (at `p` and `p + BYTES`) at a time.
trait OffsetPair: OffsetBlocks {
    /// The 64 unsigned values.
    unsafe fn values(p: *const u8) -> __m512i;
}

impl OffsetPair for Q4_1 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m512i {
        nibbles_pair(p.add(4), p.add(Self::BYTES + 4))
    }
}

impl OffsetPair for Q5_1 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m512i {
        let q = nibbles_pair(p.add(8), p.add(Self::BYTES + 8));
        let high = u64::from(u32_at(p.add(4))) | u64::from(u32_at(p.add(Self::BYTES + 4))) << 32;
        _mm512_mask_add_epi8(q, high, q, _mm512_set1_epi8(16))
    }
}

/// Offset weights against Q8_1 activations: d_w·d_a·Σq·y per block, plus m·s, whose sum is
/// kept apart in lanes 1 and 3 of a 4-lane accumulator.
struct Offset<W, P>(W, P);

impl<W: OffsetPair, P: BytePairs> Offset<W, P> {
    #[inline(always)]
    unsafe fn pair<const R: usize>(
        w: *const u8,
        acts: [*const u8; R],
        acc: &mut [__m512; R],
        offsets: &mut [__m128; R],
    ) {
        let q = W::values(w);
        // [d, m] of both blocks.
        let dm = f16_quad(w, W::BYTES);
        // Indexed so that the loop unrolls and the accumulators stay in registers.
        for r in 0..R {
            let a = acts[r];
            let y = bytes_pair(a.add(4), a.add(Q8_1_BYTES + 4));
            let sums = _mm512_cvtepi32_ps(P::dot(q, y));
            // [d·d_a, m·s] of both blocks.
            let products = _mm_mul_ps(dm, f16_quad(a, Q8_1_BYTES));
            acc[r] = _mm512_fmadd_ps(sums, spread(products, 0, 2), acc[r]);
            offsets[r] = _mm_add_ps(offsets[r], products);
        }
    }
}

impl<W: OffsetPair, P: BytePairs> Avx512Kernel for Offset<W, P> {
    const VNNI: bool = P::VNNI;
}

impl<W: OffsetPair, P: BytePairs> RowKernel for Offset<W, P> {
    const W_BYTES: usize = W::BYTES;
    const A_BYTES: usize = Q8_1_BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let nb = block_count(w, W::BYTES, &acts, Q8_1_BYTES);
        let mut acc = [_mm512_setzero_ps(); R];
        let mut offsets = [_mm_setzero_ps(); R];
        for i in (0..nb & !1).step_by(2) {
            // SAFETY: blocks i and i + 1 lie within `w` and every row (i + 1 < nb).
            let a = acts.map(|a| a.as_ptr().add(i * Q8_1_BYTES));
            Self::pair(w.as_ptr().add(i * W::BYTES), a, &mut acc, &mut offsets);
        }
        if nb % 2 == 1 {
            // The last block, paired with a zero block (d = m = 0, so it adds nothing).
            let i = nb - 1;
            let mut wp = [0u8; PAIR_BYTES];
            wp[..W::BYTES].copy_from_slice(&w[i * W::BYTES..nb * W::BYTES]);
            let mut ap = [[0u8; PAIR_BYTES]; R];
            for (buf, a) in ap.iter_mut().zip(acts) {
                buf[..Q8_1_BYTES].copy_from_slice(&a[i * Q8_1_BYTES..nb * Q8_1_BYTES]);
            }
            let ap = ap.each_ref().map(|b| b.as_ptr());
            Self::pair(wp.as_ptr(), ap, &mut acc, &mut offsets);
        }
        let mut out = [0.0; R];
        for ((o, acc), offsets) in out.iter_mut().zip(acc).zip(offsets) {
            let mut lanes = [0f32; 4];
            _mm_storeu_ps(lanes.as_mut_ptr(), offsets);
            *o = _mm512_reduce_add_ps(acc) + (lanes[1] + lanes[3]);
        }
        out
    }
}

/// A float format, read 16 elements at a time as f32 lanes.
trait FloatLanes {
    const BYTES: usize;
    unsafe fn load(p: *const u8) -> __m512;
    /// The first `n` < 16 elements at `p`, the other lanes zero; reads only those `n`.
    unsafe fn load_first(p: *const u8, n: usize) -> __m512;
}

struct F16Lanes;
struct Bf16Lanes;
struct F32Lanes;

/// The lane mask of the first `n` < 16 lanes.
#[inline(always)]
fn first_lanes(n: usize) -> __mmask16 {
    (1u16 << n) - 1
}

impl FloatLanes for F16Lanes {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
    }
    #[inline(always)]
    unsafe fn load_first(p: *const u8, n: usize) -> __m512 {
        _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_lanes(n), p.cast()))
    }
}

/// bf16 is the high half of an f32.
#[inline(always)]
unsafe fn bf16_to_f32(h: __m256i) -> __m512 {
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
}

impl FloatLanes for Bf16Lanes {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512 {
        bf16_to_f32(_mm256_loadu_si256(p.cast()))
    }
    #[inline(always)]
    unsafe fn load_first(p: *const u8, n: usize) -> __m512 {
        bf16_to_f32(_mm256_maskz_loadu_epi16(first_lanes(n), p.cast()))
    }
}

impl FloatLanes for F32Lanes {
    const BYTES: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m512 {
        _mm512_loadu_ps(p.cast())
    }
    #[inline(always)]
    unsafe fn load_first(p: *const u8, n: usize) -> __m512 {
        _mm512_maskz_loadu_ps(first_lanes(n), p.cast())
    }
}

/// Float weights against activations of the same type.
struct Float<F>(F);

impl<F: FloatLanes> Float<F> {
    #[inline(always)]
    unsafe fn group<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let n = block_count(w, F::BYTES, &acts, F::BYTES);
        let at = |p: &[u8], i: usize| p.as_ptr().add(i * F::BYTES);
        let mut acc = [[_mm512_setzero_ps(); 4]; R];
        let mut i = 0;
        // SAFETY (all loads): elements i.. i + 64 (or i + 16, or the n − i < 16 read by
        // `load_first`) lie within `w` and every row, which hold n elements.
        while i + 64 <= n {
            let wv = [
                F::load(at(w, i)),
                F::load(at(w, i + 16)),
                F::load(at(w, i + 32)),
                F::load(at(w, i + 48)),
            ];
            for r in 0..R {
                for j in 0..4 {
                    let a = F::load(at(acts[r], i + 16 * j));
                    acc[r][j] = _mm512_fmadd_ps(wv[j], a, acc[r][j]);
                }
            }
            i += 64;
        }
        while i + 16 <= n {
            let wv = F::load(at(w, i));
            for r in 0..R {
                acc[r][0] = _mm512_fmadd_ps(wv, F::load(at(acts[r], i)), acc[r][0]);
            }
            i += 16;
        }
        if i < n {
            let wv = F::load_first(at(w, i), n - i);
            for r in 0..R {
                let a = F::load_first(at(acts[r], i), n - i);
                acc[r][0] = _mm512_fmadd_ps(wv, a, acc[r][0]);
            }
        }
        let mut out = [0.0; R];
        for r in 0..R {
            let [a, b, c, d] = acc[r];
            out[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
        }
        out
    }
}

impl<F: FloatLanes> Avx512Kernel for Float<F> {
    const VNNI: bool = false;
}

impl<F: FloatLanes> RowKernel for Float<F> {
    const W_BYTES: usize = F::BYTES;
    const A_BYTES: usize = F::BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        Self::group(w, acts)
    }
}
