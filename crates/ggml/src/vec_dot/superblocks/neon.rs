//! NEON kernels, and the same with the dot-product extension.
//!
//! NEON multiplies signed bytes by signed bytes, so a super-block is unpacked into sixteen
//! vectors of signed levels in element order (16 elements each, offsets such as Q6_K's −32
//! applied) and one i32 scale per sub-block. Per activation row, each vector's 16 products
//! are summed into 4 i32 lanes (`sdot` with dotprod; `smull` + `smlal2` + `sadalp` without:
//! two products of at most 127·128 fit an i16), sub-blocks are reduced to one lane each
//! with pairwise adds and weighted by their scales in a multiply-accumulate, and the lanes
//! go to f32 once per super-block. Mins (Q2_K, Q4_K, Q5_K) go through the Q8_K bsums.
//!
//! `vdotq_s32` is not stable in Rust yet, so `sdot` is written as inline assembly.

use super::driver::{self, BlockKernel};
use super::layout::*;
use super::q8_k::{self, BSUMS, QS};
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{DotFn, DotManyFn, KernelFns};
use crate::{fp::read_f16, GgmlType};
use std::arch::aarch64::*;

pub(super) fn kernel(weight_type: GgmlType, dotprod: bool) -> Option<KernelFns> {
    macro_rules! pick {
        ($k:ident) => {
            if dotprod {
                (
                    dot_dotprod::<$k<true>> as DotFn,
                    dot_many_dotprod::<$k<true>> as DotManyFn,
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
        quantize: q8_k::quantize_neon,
        dot,
        dot_many,
    })
}

#[target_feature(enable = "neon")]
unsafe fn dot_neon<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    driver::dot::<K>(w, act)
}

#[target_feature(enable = "neon")]
unsafe fn dot_many_neon<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    driver::dot_many::<K>(w, acts, out)
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_neon_dotprod<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    driver::dot::<K>(w, act)
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_many_neon_dotprod<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    driver::dot_many::<K>(w, acts, out)
}

fn dot<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    // SAFETY: only reachable through the `KernelFns` of `Isa::Neon`, which `DotKernel` hands
    // out only after `Isa::available()` found NEON.
    unsafe { dot_neon::<K>(w, act) }
}

fn dot_many<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot`.
    unsafe { dot_many_neon::<K>(w, acts, out) }
}

fn dot_dotprod<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    // SAFETY: only reachable through the `KernelFns` of `Isa::NeonDotprod`, which
    // `DotKernel` hands out only after `Isa::available()` found NEON and dotprod.
    unsafe { dot_neon_dotprod::<K>(w, act) }
}

fn dot_many_dotprod<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot_dotprod`.
    unsafe { dot_many_neon_dotprod::<K>(w, acts, out) }
}

// ------------------------------------------------------------------------------ helpers

#[inline(always)]
unsafe fn load_u8(b: &[u8], at: usize) -> uint8x16_t {
    vld1q_u8(b[at..at + 16].as_ptr())
}

/// Eight i16 at `b[at..]`, read as bytes: activation rows carry no alignment.
#[inline(always)]
unsafe fn load_i16(b: &[u8], at: usize) -> int16x8_t {
    vreinterpretq_s16_u8(load_u8(b, at))
}

/// `acc` plus the 16 products `a·b`, summed in fours into its lanes.
#[inline(always)]
unsafe fn dot16<const DOTPROD: bool>(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    if DOTPROD {
        let mut acc = acc;
        std::arch::asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
        acc
    } else {
        let products = vmlal_high_s8(vmull_s8(vget_low_s8(a), vget_low_s8(b)), a, b);
        vpadalq_s16(acc, products)
    }
}

/// The lane sums of four vectors, one per lane.
#[inline(always)]
unsafe fn sum_lanes4(v: [int32x4_t; 4]) -> int32x4_t {
    vpaddq_s32(vpaddq_s32(v[0], v[1]), vpaddq_s32(v[2], v[3]))
}

/// Widens 8 bytes, as unsigned (`signed == false`) or signed, to two vectors of i32.
#[inline(always)]
unsafe fn widen8(x: uint8x8_t, signed: bool) -> [int32x4_t; 2] {
    let x16 = if signed {
        vmovl_s8(vreinterpret_s8_u8(x))
    } else {
        vreinterpretq_s16_u16(vmovl_u8(x))
    };
    [vmovl_s16(vget_low_s16(x16)), vmovl_high_s16(x16)]
}

/// A super-block's signed levels, 16 elements per vector, and its scales: lane k of
/// `scales[g]` is the scale of sub-block 4g+k; `G` is 4 for sixteen 16-element sub-blocks and
/// 2 for eight 32-element ones.
struct Levels<const G: usize> {
    levels: [int8x16_t; 16],
    scales: [int32x4_t; G],
    d: f32,
}

impl<const G: usize> Levels<G> {
    /// Σ scale·(sub-block dot product), in 4 lanes.
    #[inline(always)]
    unsafe fn isum<const DOTPROD: bool>(&self, act: &[u8]) -> int32x4_t {
        let vectors_per_sub = 4 / G;
        let zero = vdupq_n_s32(0);
        let mut isum = zero;
        for (g, scales) in self.scales.iter().enumerate() {
            let mut subs = [zero; 4];
            for (k, sub) in subs.iter_mut().enumerate() {
                for i in 0..vectors_per_sub {
                    let v = (4 * g + k) * vectors_per_sub + i;
                    let a = vld1q_s8(act[QS + 16 * v..QS + 16 * v + 16].as_ptr().cast());
                    *sub = dot16::<DOTPROD>(*sub, self.levels[v], a);
                }
            }
            isum = vmlaq_s32(isum, sum_lanes4(subs), *scales);
        }
        isum
    }

    /// `acc + d·d_act·isum`.
    #[inline(always)]
    unsafe fn accumulate<const DOTPROD: bool>(&self, act: &[u8], acc: float32x4_t) -> float32x4_t {
        let isum = self.isum::<DOTPROD>(act);
        vfmaq_n_f32(acc, vcvtq_f32_s32(isum), q8_k::d(act) * self.d)
    }
}

/// A levels type whose per-row sum is one f32 vector.
macro_rules! plain_kernel {
    ($name:ident, $bytes:expr, $g:literal, $unpack:ident) => {
        struct $name<const DOTPROD: bool>;

        impl<const DOTPROD: bool> BlockKernel for $name<DOTPROD> {
            const BLOCK_BYTES: usize = $bytes;
            type Unpacked = Levels<$g>;
            type Acc = float32x4_t;

            #[inline(always)]
            unsafe fn zero() -> float32x4_t {
                vdupq_n_f32(0.0)
            }

            #[inline(always)]
            unsafe fn unpack(b: &[u8]) -> Levels<$g> {
                $unpack(b)
            }

            #[inline(always)]
            unsafe fn accumulate(w: &Levels<$g>, act: &[u8], acc: &mut float32x4_t) {
                *acc = w.accumulate::<DOTPROD>(act, *acc);
            }

            #[inline(always)]
            unsafe fn finish(acc: float32x4_t) -> f32 {
                vaddvq_f32(acc)
            }
        }
    };
}

/// Levels with mins: `16 / MINS_PER_VECTOR` i16 mins, one per bsum (Q2_K) or per pair of
/// bsums (Q4_K, Q5_K).
struct WithMins<const G: usize, const M: usize> {
    levels: Levels<G>,
    mins: [int16x8_t; M],
    dmin: f32,
}

impl<const G: usize, const M: usize> WithMins<G, M> {
    /// `acc.0 + d·d_act·isum`, `acc.1 − dmin·d_act·Σ mins·bsums`.
    #[inline(always)]
    unsafe fn accumulate<const DOTPROD: bool>(
        &self,
        act: &[u8],
        acc: &mut (float32x4_t, float32x4_t),
    ) {
        acc.0 = self.levels.accumulate::<DOTPROD>(act, acc.0);
        let bsums = [load_i16(act, BSUMS), load_i16(act, BSUMS + 16)];
        let msum = if M == 1 {
            // One min per pair of bsums: add the pairs first (at most 2·16·127, an i16).
            let pairs = vpaddq_s16(bsums[0], bsums[1]);
            vmlal_high_s16(
                vmull_s16(vget_low_s16(pairs), vget_low_s16(self.mins[0])),
                pairs,
                self.mins[0],
            )
        } else {
            let mut msum = vdupq_n_s32(0);
            for (b, m) in bsums.iter().zip(&self.mins) {
                msum = vmlal_s16(msum, vget_low_s16(*b), vget_low_s16(*m));
                msum = vmlal_high_s16(msum, *b, *m);
            }
            msum
        };
        acc.1 = vfmaq_n_f32(acc.1, vcvtq_f32_s32(msum), -(q8_k::d(act) * self.dmin));
    }
}

/// A levels-with-mins type whose per-row sum is a pair of f32 vectors.
macro_rules! mins_kernel {
    ($name:ident, $bytes:expr, $g:literal, $m:literal, $unpack:ident) => {
        struct $name<const DOTPROD: bool>;

        impl<const DOTPROD: bool> BlockKernel for $name<DOTPROD> {
            const BLOCK_BYTES: usize = $bytes;
            type Unpacked = WithMins<$g, $m>;
            type Acc = (float32x4_t, float32x4_t);

            #[inline(always)]
            unsafe fn zero() -> Self::Acc {
                (vdupq_n_f32(0.0), vdupq_n_f32(0.0))
            }

            #[inline(always)]
            unsafe fn unpack(b: &[u8]) -> WithMins<$g, $m> {
                $unpack(b)
            }

            #[inline(always)]
            unsafe fn accumulate(w: &WithMins<$g, $m>, act: &[u8], acc: &mut Self::Acc) {
                w.accumulate::<DOTPROD>(act, acc);
            }

            #[inline(always)]
            unsafe fn finish(acc: Self::Acc) -> f32 {
                vaddvq_f32(acc.0) + vaddvq_f32(acc.1)
            }
        }
    };
}

mins_kernel!(Q2K, Q2_K_BYTES, 4, 2, unpack_q2_k);
plain_kernel!(Q3K, Q3_K_BYTES, 4, unpack_q3_k);
mins_kernel!(Q4K, Q4_K_BYTES, 2, 1, unpack_q4_k);
mins_kernel!(Q5K, Q5_K_BYTES, 2, 1, unpack_q5_k);
plain_kernel!(Q6K, Q6_K_BYTES, 4, unpack_q6_k);
plain_kernel!(Iq4Xs, IQ4_XS_BYTES, 2, unpack_iq4_xs);

// ------------------------------------------------------------------------------ unpacking

/// Bits `shift..shift+2` of each byte (a right shift by a run-time amount: `vshlq` shifts
/// right by negative counts).
#[inline(always)]
unsafe fn two_bits(x: uint8x16_t, shift: usize) -> uint8x16_t {
    vandq_u8(vshlq_u8(x, vdupq_n_s8(-(shift as i8))), vdupq_n_u8(3))
}

/// Q2_K's and Q3_K's low 2 bits: vector 8h+2s+i (elements 128h+32s+16i..) is bits 2s.. of
/// bytes 32h+16i..32h+16i+16.
#[inline(always)]
unsafe fn two_bit_levels(b: &[u8], at: usize) -> [uint8x16_t; 16] {
    let mut levels = [vdupq_n_u8(0); 16];
    for h in 0..2 {
        for i in 0..2 {
            let bytes = load_u8(b, at + 32 * h + 16 * i);
            for s in 0..4 {
                levels[8 * h + 2 * s + i] = two_bits(bytes, 2 * s);
            }
        }
    }
    levels
}

#[inline(always)]
unsafe fn unpack_q2_k(b: &[u8]) -> WithMins<4, 2> {
    let raw = load_u8(b, q2_k::SCALES);
    let scales = vandq_u8(raw, vdupq_n_u8(0xf));
    let [s0, s1] = widen8(vget_low_u8(scales), false);
    let [s2, s3] = widen8(vget_high_u8(scales), false);
    let mins = vshrq_n_u8::<4>(raw);
    let mut levels = [vdupq_n_s8(0); 16];
    for (level, low) in levels.iter_mut().zip(two_bit_levels(b, q2_k::QS)) {
        *level = vreinterpretq_s8_u8(low);
    }
    WithMins {
        levels: Levels {
            levels,
            scales: [s0, s1, s2, s3],
            d: read_f16(b, q2_k::D),
        },
        mins: [
            vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins))),
            vreinterpretq_s16_u16(vmovl_high_u8(mins)),
        ],
        dmin: read_f16(b, q2_k::DMIN),
    }
}

/// Two-bit levels, minus 4 unless the element's `hmask` bit (bit 4h+s of byte 16i+l for
/// element 128h+32s+16i+l) is set.
#[inline(always)]
unsafe fn unpack_q3_k(b: &[u8]) -> Levels<4> {
    let low = two_bit_levels(b, q3_k::QS);
    let hmask = [load_u8(b, q3_k::HMASK), load_u8(b, q3_k::HMASK + 16)];
    let mut levels = [vdupq_n_s8(0); 16];
    for h in 0..2 {
        for s in 0..4 {
            for (i, &hmask) in hmask.iter().enumerate() {
                let v = 8 * h + 2 * s + i;
                let high = vtstq_u8(hmask, vdupq_n_u8(1 << (4 * h + s)));
                let level = vorrq_u8(low[v], vandq_u8(high, vdupq_n_u8(4)));
                levels[v] = vsubq_s8(vreinterpretq_s8_u8(level), vdupq_n_s8(4));
            }
        }
    }
    let biased = q3_k_scales(&b[q3_k::SCALES..q3_k::SCALES + 12]);
    let scales = vsubq_s8(
        vreinterpretq_s8_u8(vld1q_u8(biased.as_ptr())),
        vdupq_n_s8(32),
    );
    Levels {
        levels,
        scales: sixteen_i8_scales(scales),
        d: read_f16(b, q3_k::D),
    }
}

/// Sixteen i8 scales as the `Levels<4>` scale vectors.
#[inline(always)]
unsafe fn sixteen_i8_scales(scales: int8x16_t) -> [int32x4_t; 4] {
    let raw = vreinterpretq_u8_s8(scales);
    let [s0, s1] = widen8(vget_low_u8(raw), true);
    let [s2, s3] = widen8(vget_high_u8(raw), true);
    [s0, s1, s2, s3]
}

/// Vector 4p+2n+i (elements 64p+32n+16i..) is nibble n of bytes 32p+16i..32p+16i+16 at
/// `b[qs..]`; the scales and mins are Q4_K's and Q5_K's.
#[inline(always)]
unsafe fn k4_levels(b: &[u8], qs: usize) -> WithMins<2, 1> {
    let mut levels = [vdupq_n_s8(0); 16];
    for p in 0..4 {
        for i in 0..2 {
            let bytes = load_u8(b, qs + 32 * p + 16 * i);
            levels[4 * p + i] = vreinterpretq_s8_u8(vandq_u8(bytes, vdupq_n_u8(0xf)));
            levels[4 * p + 2 + i] = vreinterpretq_s8_u8(vshrq_n_u8::<4>(bytes));
        }
    }
    let packed = k4_scales_mins(&b[q4_k::SCALES..q4_k::SCALES + 12]);
    let packed = vld1q_u8(packed.as_ptr());
    WithMins {
        levels: Levels {
            levels,
            scales: widen8(vget_low_u8(packed), false),
            d: read_f16(b, q4_k::D),
        },
        mins: [vreinterpretq_s16_u16(vmovl_high_u8(packed))],
        dmin: read_f16(b, q4_k::D + 2),
    }
}

#[inline(always)]
unsafe fn unpack_q4_k(b: &[u8]) -> WithMins<2, 1> {
    k4_levels(b, q4_k::QS)
}

/// As Q4_K, plus 16 where bit 2p+n of `qh[16i + l]` is set.
#[inline(always)]
unsafe fn unpack_q5_k(b: &[u8]) -> WithMins<2, 1> {
    let mut w = k4_levels(b, q5_k::QS);
    let qh = [load_u8(b, q5_k::QH), load_u8(b, q5_k::QH + 16)];
    for (v, level) in w.levels.levels.iter_mut().enumerate() {
        let (bit, i) = (v / 2, v % 2);
        let high = vandq_u8(vtstq_u8(qh[i], vdupq_n_u8(1 << bit)), vdupq_n_u8(16));
        *level = vreinterpretq_s8_u8(vorrq_u8(vreinterpretq_u8_s8(*level), high));
    }
    w
}

/// Vector 8h+2k+i (elements 128h+32k+16i..) is nibble k/2 of `ql[64h + 32(k%2) + 16i..]`
/// with bits 2k.. of `qh[32h + 16i..]` on top, minus 32.
#[inline(always)]
unsafe fn unpack_q6_k(b: &[u8]) -> Levels<4> {
    let mut levels = [vdupq_n_s8(0); 16];
    for h in 0..2 {
        for i in 0..2 {
            let qh = load_u8(b, q6_k::QH + 32 * h + 16 * i);
            for k in 0..4 {
                let ql = load_u8(b, q6_k::QL + 64 * h + 32 * (k % 2) + 16 * i);
                let low = if k < 2 {
                    vandq_u8(ql, vdupq_n_u8(0xf))
                } else {
                    vshrq_n_u8::<4>(ql)
                };
                let top = vandq_u8(vshlq_u8(qh, vdupq_n_s8(4 - 2 * k as i8)), vdupq_n_u8(0x30));
                let level = vreinterpretq_s8_u8(vorrq_u8(low, top));
                levels[8 * h + 2 * k + i] = vsubq_s8(level, vdupq_n_s8(32));
            }
        }
    }
    Levels {
        levels,
        scales: sixteen_i8_scales(vld1q_s8(b[q6_k::SCALES..q6_k::SCALES + 16].as_ptr().cast())),
        d: read_f16(b, q6_k::D),
    }
}

/// Vector 2j is sub-block j's low nibbles looked up in `kvalues_iq4nl`, vector 2j+1 its high
/// nibbles.
#[inline(always)]
unsafe fn unpack_iq4_xs(b: &[u8]) -> Levels<2> {
    let table = vld1q_s8(KVALUES_IQ4NL.as_ptr());
    let mut levels = [table; 16];
    for j in 0..8 {
        let bytes = load_u8(b, iq4_xs::QS + 16 * j);
        levels[2 * j] = vqtbl1q_s8(table, vandq_u8(bytes, vdupq_n_u8(0xf)));
        levels[2 * j + 1] = vqtbl1q_s8(table, vshrq_n_u8::<4>(bytes));
    }
    let biased = iq4_xs_scales(b);
    let scales = vsub_s8(vreinterpret_s8_u8(vld1_u8(biased.as_ptr())), vdup_n_s8(32));
    Levels {
        levels,
        scales: widen8(vreinterpret_u8_s8(scales), true),
        d: read_f16(b, iq4_xs::D),
    }
}
