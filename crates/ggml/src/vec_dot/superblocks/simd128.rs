//! WebAssembly SIMD128 kernels ([`Isa::Simd128`](crate::Isa::Simd128)).
//!
//! A super-block is unpacked once into sixteen vectors of signed levels in element order (16
//! elements each, offsets such as Q6_K's −32 applied) and one i16 scale per group of vectors
//! that share a sub-block scale. Per activation row, `i16x8.extmul_{low,high}_i8x16_s`
//! multiplies levels by quants into i16 lanes, the products of a group are added in i16 lanes,
//! and `i32x4.dot_i16x8_s` against the group's scale both widens them and weights them, into
//! 4 i32 lanes. The i16 sums cannot overflow: a lane adds 2 products per vector, of at most
//! 127·128 (IQ4_XS, one vector per group), 32·128 (Q6_K, one vector), 4·128 (Q2_K, Q3_K, one
//! vector) or 31·128 (Q4_K, Q5_K: two vectors per 32-element sub-block, 4 products).
//!
//! The lanes are reduced to the super-block's exact integer sum, and the mins go through the
//! Q8_K bsums, also in integers, so the f32 side is the scalar kernel's own expression: these
//! kernels agree with it bit for bit.

use core::arch::wasm32::*;

use super::driver::{self, BlockKernel};
use super::layout::*;
use super::q8_k::{self, BSUMS, QS};
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{DotFn, DotManyFn, KernelFns};
use crate::{fp::read_f16, GgmlType};

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
    // SAFETY: SIMD128 is compiled into the whole module (this file exists only with
    // `target_feature = "simd128"`), and an engine without it refuses the module.
    unsafe { driver::dot::<K>(w, act) }
}

fn dot_many<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    // SAFETY: as in `dot`.
    unsafe { driver::dot_many::<K>(w, acts, out) }
}

/// 16 bytes at `b[at..]`.
#[inline(always)]
fn load(b: &[u8], at: usize) -> v128 {
    let bytes: &[u8; 16] = b[at..at + 16].try_into().expect("16 bytes");
    // SAFETY: 16 readable bytes; wasm loads need no alignment.
    unsafe { v128_load(bytes.as_ptr().cast()) }
}

#[inline(always)]
fn sum_lanes(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v)
        + i32x4_extract_lane::<1>(v)
        + i32x4_extract_lane::<2>(v)
        + i32x4_extract_lane::<3>(v)
}

/// A super-block's signed levels, 16 elements per vector, and its scales: `scales[g]` is the
/// i16 scale of vectors `g·16/G ..` splatted over 8 lanes. `mins[k]` holds in lane l the
/// min of the elements of bsum 8k+l (zero for the types without mins).
struct Levels<const G: usize, const MINS: bool> {
    levels: [v128; 16],
    scales: [v128; G],
    mins: [v128; 2],
    d: f32,
    dmin: f32,
}

impl<const G: usize, const MINS: bool> Levels<G, MINS> {
    #[inline(always)]
    fn new(d: f32) -> Self {
        Levels {
            levels: [i8x16_splat(0); 16],
            scales: [i16x8_splat(0); G],
            mins: [i16x8_splat(0); 2],
            d,
            dmin: 0.0,
        }
    }

    /// The scalar kernel's `acc += d_act·d·isum − d_act·dmin·msum`, with the same exact
    /// integer sums.
    #[inline(always)]
    fn accumulate(&self, act: &[u8], acc: &mut f32) {
        let per_group = 16 / G;
        let mut isum = i32x4_splat(0);
        for (g, &scale) in self.scales.iter().enumerate() {
            let mut products = i16x8_splat(0);
            for v in g * per_group..(g + 1) * per_group {
                let a = load(act, QS + 16 * v);
                let w = self.levels[v];
                products = i16x8_add(products, i16x8_extmul_low_i8x16(w, a));
                products = i16x8_add(products, i16x8_extmul_high_i8x16(w, a));
            }
            isum = i32x4_add(isum, i32x4_dot_i16x8(products, scale));
        }
        let isum = sum_lanes(isum);
        let msum = if MINS {
            sum_lanes(i32x4_add(
                i32x4_dot_i16x8(load(act, BSUMS), self.mins[0]),
                i32x4_dot_i16x8(load(act, BSUMS + 16), self.mins[1]),
            ))
        } else {
            0
        };
        let dy = q8_k::d(act);
        *acc += (dy * self.d) * isum as f32 - (dy * self.dmin) * msum as f32;
    }
}

macro_rules! levels_kernel {
    ($name:ident, $bytes:expr, $g:literal, $mins:literal, $unpack:ident) => {
        struct $name;

        impl BlockKernel for $name {
            const BLOCK_BYTES: usize = $bytes;
            type Unpacked = Levels<$g, $mins>;
            type Acc = f32;

            #[inline(always)]
            unsafe fn zero() -> f32 {
                0.0
            }

            #[inline(always)]
            unsafe fn unpack(b: &[u8]) -> Levels<$g, $mins> {
                $unpack(b)
            }

            #[inline(always)]
            unsafe fn accumulate(w: &Levels<$g, $mins>, act: &[u8], acc: &mut f32) {
                w.accumulate(act, acc)
            }

            #[inline(always)]
            unsafe fn finish(acc: f32) -> f32 {
                acc
            }
        }
    };
}

levels_kernel!(Q2K, Q2_K_BYTES, 16, true, unpack_q2_k);
levels_kernel!(Q3K, Q3_K_BYTES, 16, false, unpack_q3_k);
levels_kernel!(Q4K, Q4_K_BYTES, 8, true, unpack_q4_k);
levels_kernel!(Q5K, Q5_K_BYTES, 8, true, unpack_q5_k);
levels_kernel!(Q6K, Q6_K_BYTES, 16, false, unpack_q6_k);
// IQ4_XS has 32-element sub-blocks, but levels up to 127: one vector per group, each scale
// twice, keeps the i16 sums in range.
levels_kernel!(Iq4Xs, IQ4_XS_BYTES, 16, false, unpack_iq4_xs);

/// Each scale splatted over 8 i16 lanes.
#[inline(always)]
fn splats<const G: usize>(values: [i16; G]) -> [v128; G] {
    let mut out = [i16x8_splat(0); G];
    for (out, v) in out.iter_mut().zip(values) {
        *out = i16x8_splat(v);
    }
    out
}

/// Q2_K's and Q3_K's low 2 bits: vector 8h+2s+i (elements 128h+32s+16i..) is bits 2s.. of
/// bytes 32h+16i..32h+16i+16 at `b[at..]`.
#[inline(always)]
fn two_bit_levels(b: &[u8], at: usize) -> [v128; 16] {
    let mut levels = [i8x16_splat(0); 16];
    for h in 0..2 {
        for i in 0..2 {
            let bytes = load(b, at + 32 * h + 16 * i);
            for s in 0..4 {
                levels[8 * h + 2 * s + i] =
                    v128_and(u8x16_shr(bytes, 2 * s as u32), u8x16_splat(3));
            }
        }
    }
    levels
}

/// Sub-block j (vector j) has scale `scales[j] & 15` and min `scales[j] >> 4`.
#[inline(always)]
fn unpack_q2_k(b: &[u8]) -> Levels<16, true> {
    let mut l = Levels::new(read_f16(b, q2_k::D));
    l.dmin = read_f16(b, q2_k::DMIN);
    let packed = &b[q2_k::SCALES..q2_k::SCALES + 16];
    l.scales = splats(std::array::from_fn(|j| i16::from(packed[j] & 0xf)));
    let raw = load(b, q2_k::SCALES);
    let mins = u8x16_shr(raw, 4);
    l.mins = [u16x8_extend_low_u8x16(mins), u16x8_extend_high_u8x16(mins)];
    l.levels = two_bit_levels(b, q2_k::QS);
    l
}

/// Two-bit levels, minus 4 unless the element's `hmask` bit (bit 4h+s of byte 16i+l for
/// element 128h+32s+16i+l) is set.
#[inline(always)]
fn unpack_q3_k(b: &[u8]) -> Levels<16, false> {
    let mut l = Levels::new(read_f16(b, q3_k::D));
    let biased = q3_k_scales(&b[q3_k::SCALES..q3_k::SCALES + 12]);
    l.scales = splats(std::array::from_fn(|j| i16::from(biased[j]) - 32));
    let low = two_bit_levels(b, q3_k::QS);
    let hmask = [load(b, q3_k::HMASK), load(b, q3_k::HMASK + 16)];
    for h in 0..2 {
        for s in 0..4 {
            for (i, &hmask) in hmask.iter().enumerate() {
                let v = 8 * h + 2 * s + i;
                let bit = v128_and(hmask, u8x16_splat(1 << (4 * h + s)));
                let high = v128_and(i8x16_ne(bit, u8x16_splat(0)), u8x16_splat(4));
                l.levels[v] = i8x16_sub(v128_or(low[v], high), i8x16_splat(4));
            }
        }
    }
    l
}

/// Vector 4p+2n+i (elements 64p+32n+16i..) is nibble n of bytes 32p+16i..32p+16i+16 at
/// `b[qs..]`; sub-block j (vectors 2j, 2j+1) has Q4_K's and Q5_K's scale and min j, and its
/// min applies to bsums 2j and 2j+1.
#[inline(always)]
fn k4_levels(b: &[u8], qs: usize) -> Levels<8, true> {
    let mut l = Levels::new(read_f16(b, q4_k::D));
    l.dmin = read_f16(b, q4_k::D + 2);
    for p in 0..4 {
        for i in 0..2 {
            let bytes = load(b, qs + 32 * p + 16 * i);
            l.levels[4 * p + i] = v128_and(bytes, u8x16_splat(0xf));
            l.levels[4 * p + 2 + i] = u8x16_shr(bytes, 4);
        }
    }
    let packed = k4_scales_mins(&b[q4_k::SCALES..q4_k::SCALES + 12]);
    l.scales = splats(std::array::from_fn(|j| i16::from(packed[j])));
    let per_bsum: [i16; 16] = std::array::from_fn(|k| i16::from(packed[8 + k / 2]));
    l.mins = [
        i16x8(
            per_bsum[0],
            per_bsum[1],
            per_bsum[2],
            per_bsum[3],
            per_bsum[4],
            per_bsum[5],
            per_bsum[6],
            per_bsum[7],
        ),
        i16x8(
            per_bsum[8],
            per_bsum[9],
            per_bsum[10],
            per_bsum[11],
            per_bsum[12],
            per_bsum[13],
            per_bsum[14],
            per_bsum[15],
        ),
    ];
    l
}

#[inline(always)]
fn unpack_q4_k(b: &[u8]) -> Levels<8, true> {
    k4_levels(b, q4_k::QS)
}

/// As Q4_K, plus 16 where bit 2p+n of `qh[16i + l]` is set.
#[inline(always)]
fn unpack_q5_k(b: &[u8]) -> Levels<8, true> {
    let mut l = k4_levels(b, q5_k::QS);
    let qh = [load(b, q5_k::QH), load(b, q5_k::QH + 16)];
    for (v, level) in l.levels.iter_mut().enumerate() {
        let (bit, i) = (v / 2, v % 2);
        let high = v128_and(u8x16_shl(u8x16_shr(qh[i], bit as u32), 4), u8x16_splat(16));
        *level = v128_or(*level, high);
    }
    l
}

/// Vector 8h+2k+i (elements 128h+32k+16i..) is nibble k/2 of `ql[64h + 32(k%2) + 16i..]`
/// with bits 2k.. of `qh[32h + 16i..]` on top, minus 32.
#[inline(always)]
fn unpack_q6_k(b: &[u8]) -> Levels<16, false> {
    let mut l = Levels::new(read_f16(b, q6_k::D));
    let scales = &b[q6_k::SCALES..q6_k::SCALES + 16];
    l.scales = splats(std::array::from_fn(|j| i16::from(scales[j] as i8)));
    for h in 0..2 {
        for i in 0..2 {
            let qh = load(b, q6_k::QH + 32 * h + 16 * i);
            for k in 0..4 {
                let ql = load(b, q6_k::QL + 64 * h + 32 * (k % 2) + 16 * i);
                let low = if k < 2 {
                    v128_and(ql, u8x16_splat(0xf))
                } else {
                    u8x16_shr(ql, 4)
                };
                let top = v128_and(u8x16_shl(u8x16_shr(qh, 2 * k as u32), 4), u8x16_splat(0x30));
                l.levels[8 * h + 2 * k + i] = i8x16_sub(v128_or(low, top), i8x16_splat(32));
            }
        }
    }
    l
}

/// Vector 2j is sub-block j's low nibbles looked up in `kvalues_iq4nl`, vector 2j+1 its high
/// nibbles; both carry sub-block j's scale.
#[inline(always)]
fn unpack_iq4_xs(b: &[u8]) -> Levels<16, false> {
    let mut l = Levels::new(read_f16(b, iq4_xs::D));
    let table = load(&KVALUES_IQ4NL.map(|v| v as u8), 0);
    for j in 0..8 {
        let bytes = load(b, iq4_xs::QS + 16 * j);
        l.levels[2 * j] = i8x16_swizzle(table, v128_and(bytes, u8x16_splat(0xf)));
        l.levels[2 * j + 1] = i8x16_swizzle(table, u8x16_shr(bytes, 4));
    }
    let biased = iq4_xs_scales(b);
    l.scales = splats(std::array::from_fn(|v| i16::from(biased[v / 2]) - 32));
    l
}
