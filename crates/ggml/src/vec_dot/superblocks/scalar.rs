//! The portable kernels, and the definition the SIMD ones are tested against: each
//! super-block is unpacked into plain integer levels (offsets such as Q6_K's −32 already
//! applied) and one integer scale per sub-block; each sub-block's products with the Q8_K
//! quants are summed exactly in integers, weighted by the sub-block scales, and the mins
//! (Q2_K, Q4_K, Q5_K) are applied through the activation block sums. Only the final
//! `d·isum − dmin·msum` per super-block is in f32, as in ggml's kernels.

use super::driver::{self, BlockKernel};
use super::layout::*;
use super::q8_k;
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{DotFn, DotManyFn, KernelFns};
use crate::{fp::read_f16, GgmlType, QK_K};

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
        quantize: q8_k::quantize_scalar,
        dot,
        dot_many,
    })
}

fn dot<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    // SAFETY: the scalar kernels use no instructions beyond the target's baseline.
    unsafe { driver::dot::<K>(w, act) }
}

fn dot_many<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot`.
    unsafe { driver::dot_many::<K>(w, acts, out) }
}

/// A super-block as integers: 256 levels and `N` sub-blocks of `256 / N` elements, each with
/// a scale and (zero for the types without) a min.
pub(super) struct Levels<const N: usize> {
    pub q: [i8; QK_K],
    pub scales: [i32; N],
    pub mins: [i32; N],
    pub d: f32,
    pub dmin: f32,
}

impl<const N: usize> Levels<N> {
    fn new(d: f32) -> Self {
        Levels {
            q: [0; QK_K],
            scales: [0; N],
            mins: [0; N],
            d,
            dmin: 0.0,
        }
    }

    fn accumulate(&self, act: &[u8], acc: &mut f32) {
        let len = QK_K / N;
        let a = q8_k::qs(act);
        let mut isum = 0i32;
        for (j, (q, a)) in self
            .q
            .chunks_exact(len)
            .zip(a.chunks_exact(len))
            .enumerate()
        {
            // Levels and quants are i8, so each product fits an i16, which lets the compiler
            // use 16-bit multiply-adds.
            let s: i32 = q
                .iter()
                .zip(a)
                .map(|(&q, &a)| i32::from(i16::from(q) * i16::from(a as i8)))
                .sum();
            isum += self.scales[j] * s;
        }
        let bsums_per_sub = len / 16;
        let msum: i32 = (0..N)
            .map(|j| {
                let b: i32 = (j * bsums_per_sub..(j + 1) * bsums_per_sub)
                    .map(|k| q8_k::bsum(act, k))
                    .sum();
                self.mins[j] * b
            })
            .sum();
        let dy = q8_k::d(act);
        *acc += (dy * self.d) * isum as f32 - (dy * self.dmin) * msum as f32;
    }
}

/// Implements [`BlockKernel`] for a type whose `unpack` returns `Levels<$n>`.
macro_rules! levels_kernel {
    ($name:ident, $bytes:expr, $n:literal, $unpack:expr) => {
        struct $name;

        impl BlockKernel for $name {
            const BLOCK_BYTES: usize = $bytes;
            type Unpacked = Levels<$n>;
            type Acc = f32;

            #[inline(always)]
            unsafe fn zero() -> f32 {
                0.0
            }

            #[inline(always)]
            unsafe fn unpack(w: &[u8]) -> Levels<$n> {
                $unpack(w)
            }

            #[inline(always)]
            unsafe fn accumulate(w: &Levels<$n>, act: &[u8], acc: &mut f32) {
                w.accumulate(act, acc)
            }

            #[inline(always)]
            unsafe fn finish(acc: f32) -> f32 {
                acc
            }
        }
    };
}

levels_kernel!(Q2K, Q2_K_BYTES, 16, unpack_q2_k);
levels_kernel!(Q3K, Q3_K_BYTES, 16, unpack_q3_k);
levels_kernel!(Q4K, Q4_K_BYTES, 8, unpack_q4_k);
levels_kernel!(Q5K, Q5_K_BYTES, 8, unpack_q5_k);
levels_kernel!(Q6K, Q6_K_BYTES, 16, unpack_q6_k);
levels_kernel!(Iq4Xs, IQ4_XS_BYTES, 8, unpack_iq4_xs);

/// Element `128h + 32s + m` is bits 2s.. of `qs[32h + m]`; sub-block j has scale
/// `scales[j] & 15` and min `scales[j] >> 4`.
pub(super) fn unpack_q2_k(b: &[u8]) -> Levels<16> {
    let mut l = Levels::new(read_f16(b, q2_k::D));
    l.dmin = read_f16(b, q2_k::DMIN);
    for (j, &sc) in b[q2_k::SCALES..q2_k::SCALES + 16].iter().enumerate() {
        l.scales[j] = i32::from(sc & 0xf);
        l.mins[j] = i32::from(sc >> 4);
    }
    two_bit_levels(&b[q2_k::QS..q2_k::QS + 64], &mut l.q);
    l
}

/// As Q2_K for the low 2 bits; the high bit of element `128h + 32s + m` is bit 4h+s of
/// `hmask[m]`, and a clear high bit means −4.
pub(super) fn unpack_q3_k(b: &[u8]) -> Levels<16> {
    let mut l = Levels::new(read_f16(b, q3_k::D));
    let scales = q3_k_scales(&b[q3_k::SCALES..q3_k::SCALES + 12]);
    for (dst, &sc) in l.scales.iter_mut().zip(&scales) {
        *dst = i32::from(sc) - 32;
    }
    two_bit_levels(&b[q3_k::QS..q3_k::QS + 64], &mut l.q);
    let hmask = &b[q3_k::HMASK..q3_k::HMASK + 32];
    for (bit, q) in l.q.chunks_exact_mut(32).enumerate() {
        for (q, &h) in q.iter_mut().zip(hmask) {
            *q -= (((h >> bit) & 1) ^ 1) as i8 * 4;
        }
    }
    l
}

/// Element `64p + 32n + l` is nibble n of `qs[32p + l]`.
pub(super) fn unpack_q4_k(b: &[u8]) -> Levels<8> {
    let mut l = k4_head(b);
    nibble_levels(&b[q4_k::QS..q4_k::QS + 128], &mut l.q);
    l
}

/// Q4_K's and Q5_K's low 4 bits.
fn nibble_levels(qs: &[u8], levels: &mut [i8; QK_K]) {
    for (q, out) in qs.chunks_exact(32).zip(levels.chunks_exact_mut(64)) {
        let (low, high) = out.split_at_mut(32);
        for ((&q, low), high) in q.iter().zip(low).zip(high) {
            *low = (q & 0xf) as i8;
            *high = (q >> 4) as i8;
        }
    }
}

/// Q2_K's and Q3_K's low 2 bits: element `128h + 32s + m` is bits 2s.. of `qs[32h + m]`.
fn two_bit_levels(qs: &[u8], levels: &mut [i8; QK_K]) {
    for (q, out) in qs.chunks_exact(32).zip(levels.chunks_exact_mut(128)) {
        for (s, out) in out.chunks_exact_mut(32).enumerate() {
            for (&q, out) in q.iter().zip(out) {
                *out = ((q >> (2 * s)) & 3) as i8;
            }
        }
    }
}

/// As Q4_K, with the fifth bit of element `64p + 32n + l` at bit 2p+n of `qh[l]`.
pub(super) fn unpack_q5_k(b: &[u8]) -> Levels<8> {
    let mut l = k4_head(b);
    nibble_levels(&b[q5_k::QS..q5_k::QS + 128], &mut l.q);
    let qh = &b[q5_k::QH..q5_k::QH + 32];
    for (bit, q) in l.q.chunks_exact_mut(32).enumerate() {
        for (q, &h) in q.iter_mut().zip(qh) {
            *q |= (((h >> bit) & 1) << 4) as i8;
        }
    }
    l
}

/// d, dmin and the scales and mins of Q4_K and Q5_K.
fn k4_head(b: &[u8]) -> Levels<8> {
    let mut l = Levels::new(read_f16(b, q4_k::D));
    l.dmin = read_f16(b, q4_k::D + 2);
    let packed = k4_scales_mins(&b[q4_k::SCALES..q4_k::SCALES + 12]);
    for j in 0..8 {
        l.scales[j] = i32::from(packed[j]);
        l.mins[j] = i32::from(packed[8 + j]);
    }
    l
}

/// Element `128h + 32k + l` has its low 4 bits in nibble k/2 of `ql[64h + 32(k%2) + l]` and
/// its top 2 bits at bits 2k.. of `qh[32h + l]`; levels are stored plus 32.
pub(super) fn unpack_q6_k(b: &[u8]) -> Levels<16> {
    let mut l = Levels::new(read_f16(b, q6_k::D));
    for (dst, &sc) in l.scales.iter_mut().zip(&b[q6_k::SCALES..q6_k::SCALES + 16]) {
        *dst = i32::from(sc as i8);
    }
    let ql = &b[q6_k::QL..q6_k::QL + 128];
    let qh = &b[q6_k::QH..q6_k::QH + 64];
    for ((ql, qh), out) in ql
        .chunks_exact(64)
        .zip(qh.chunks_exact(32))
        .zip(l.q.chunks_exact_mut(128))
    {
        for (k, out) in out.chunks_exact_mut(32).enumerate() {
            let ql = &ql[32 * (k % 2)..32 * (k % 2) + 32];
            for ((&low, &high), out) in ql.iter().zip(qh).zip(out) {
                let low = (low >> (4 * (k / 2))) & 0xf;
                let high = (high >> (2 * k)) & 3;
                *out = (low | (high << 4)) as i8 - 32;
            }
        }
    }
    l
}

/// Sub-block j's element i is `kvalues_iq4nl[nibble]` of `qs[16j + i % 16]`, low nibble
/// for i < 16.
pub(super) fn unpack_iq4_xs(b: &[u8]) -> Levels<8> {
    let mut l = Levels::new(read_f16(b, iq4_xs::D));
    for (dst, sc) in l.scales.iter_mut().zip(iq4_xs_scales(b)) {
        *dst = i32::from(sc) - 32;
    }
    let qs = &b[iq4_xs::QS..iq4_xs::QS + 128];
    for (q, out) in qs.chunks_exact(16).zip(l.q.chunks_exact_mut(32)) {
        let (low, high) = out.split_at_mut(16);
        for ((&q, low), high) in q.iter().zip(low).zip(high) {
            *low = KVALUES_IQ4NL[usize::from(q & 0xf)];
            *high = KVALUES_IQ4NL[usize::from(q >> 4)];
        }
    }
    l
}
