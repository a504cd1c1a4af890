//! WebAssembly SIMD128 kernels ([`Isa::Simd128`](crate::Isa::Simd128)) for the integer types:
//! a weight block is unpacked once to 32 signed bytes in two 16-byte registers and used for
//! every activation row. Each block's products are widened to 16 bits and summed pairwise
//! into 4 i32 lanes (`i32x4.dot_i16x8_s`), exactly; the lanes are added and the block's
//! scales applied in f32 in the scalar kernel's order, so these kernels agree with it bit for
//! bit.
//!
//! The float weight types keep the scalar kernel: its f64 sums have no SIMD128 form.

use core::arch::wasm32::*;

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES,
};
use super::{quantize, scalar};
use crate::fp::read_f16;
use crate::vec_dot::KernelFns;
use crate::GgmlType;

pub(super) fn kernel(weight_type: GgmlType) -> Option<KernelFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q4_0 => signed::<Q4_0>(),
        T::Q5_0 => signed::<Q5_0>(),
        T::Q8_0 => signed::<Q8_0>(),
        T::IQ4_NL => signed::<Iq4Nl>(),
        T::Q4_1 => offset::<Q4_1>(),
        T::Q5_1 => offset::<Q5_1>(),
        T::F16 | T::BF16 | T::F32 => return scalar::kernel(weight_type),
        _ => return None,
    })
}

/// 16 bytes from the start of `bytes` (which must hold them) as one register.
#[inline(always)]
fn load16(bytes: &[u8]) -> v128 {
    let bytes: &[u8; 16] = bytes[..16].try_into().expect("16 bytes");
    // SAFETY: 16 readable bytes; wasm loads need no alignment.
    unsafe { v128_load(bytes.as_ptr().cast()) }
}

/// A block's 32 integers, elements 0..16 and 16..32, as signed bytes. The default takes the
/// scalar unpacker's; the common types unpack in registers.
trait SimdLevels {
    const BYTES: usize;
    fn levels(block: &[u8]) -> (v128, v128);
}

/// Low and high nibbles of the 16 bytes at `qs`: elements 0..16 and 16..32, unsigned.
#[inline(always)]
fn nibbles(qs: &[u8]) -> (v128, v128) {
    let q = load16(qs);
    (v128_and(q, u8x16_splat(0x0F)), u8x16_shr(q, 4))
}

fn from_array(q: [i8; 32]) -> (v128, v128) {
    let q = q.map(|v| v as u8);
    (load16(&q[..16]), load16(&q[16..]))
}

impl SimdLevels for Q4_0 {
    const BYTES: usize = <Q4_0 as SignedBlocks>::BYTES;
    #[inline(always)]
    fn levels(block: &[u8]) -> (v128, v128) {
        let (lo, hi) = nibbles(&block[2..18]);
        let eight = i8x16_splat(8);
        (i8x16_sub(lo, eight), i8x16_sub(hi, eight))
    }
}

impl SimdLevels for Q8_0 {
    const BYTES: usize = <Q8_0 as SignedBlocks>::BYTES;
    #[inline(always)]
    fn levels(block: &[u8]) -> (v128, v128) {
        (load16(&block[2..18]), load16(&block[18..34]))
    }
}

/// The fifth bits of Q5_0 and Q5_1 blocks as 0 or 16 per element: element j's is bit j of the
/// little-endian word `qh`; each byte of the word is spread over 8 lanes and tested by its
/// bit.
#[inline(always)]
fn fifth_bits(qh: &[u8]) -> (v128, v128) {
    let word = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let bytes = u32x4_splat(word);
    let bits = u8x16(1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128);
    let spread = |first: u8| {
        let (a, b) = (first, first + 1);
        let index = u8x16(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b);
        let set = i8x16_ne(v128_and(i8x16_swizzle(bytes, index), bits), u8x16_splat(0));
        v128_and(set, u8x16_splat(16))
    };
    (spread(0), spread(2))
}

impl SimdLevels for Q5_0 {
    const BYTES: usize = <Q5_0 as SignedBlocks>::BYTES;
    #[inline(always)]
    fn levels(block: &[u8]) -> (v128, v128) {
        let (lo, hi) = nibbles(&block[6..22]);
        let (hlo, hhi) = fifth_bits(&block[2..6]);
        let sixteen = i8x16_splat(16);
        (
            i8x16_sub(v128_or(lo, hlo), sixteen),
            i8x16_sub(v128_or(hi, hhi), sixteen),
        )
    }
}

impl SimdLevels for Iq4Nl {
    const BYTES: usize = <Iq4Nl as SignedBlocks>::BYTES;
    fn levels(block: &[u8]) -> (v128, v128) {
        from_array(Iq4Nl::unpack(block).1)
    }
}

impl SimdLevels for Q4_1 {
    const BYTES: usize = <Q4_1 as OffsetBlocks>::BYTES;
    #[inline(always)]
    fn levels(block: &[u8]) -> (v128, v128) {
        nibbles(&block[4..20])
    }
}

impl SimdLevels for Q5_1 {
    const BYTES: usize = <Q5_1 as OffsetBlocks>::BYTES;
    #[inline(always)]
    fn levels(block: &[u8]) -> (v128, v128) {
        // Levels are 0..32: as signed bytes they keep their values.
        let (lo, hi) = nibbles(&block[8..24]);
        let (hlo, hhi) = fifth_bits(&block[4..8]);
        (v128_or(lo, hlo), v128_or(hi, hhi))
    }
}

/// The exact integer sum of the 32 products of a block's levels with 32 signed activation
/// bytes.
#[inline(always)]
fn block_sum((lo, hi): (v128, v128), a: &[u8]) -> i32 {
    let (alo, ahi) = (load16(a), load16(&a[16..]));
    let products = |w: v128, a: v128| {
        i32x4_add(
            i32x4_dot_i16x8(i16x8_extend_low_i8x16(w), i16x8_extend_low_i8x16(a)),
            i32x4_dot_i16x8(i16x8_extend_high_i8x16(w), i16x8_extend_high_i8x16(a)),
        )
    };
    let s = i32x4_add(products(lo, alo), products(hi, ahi));
    i32x4_extract_lane::<0>(s)
        + i32x4_extract_lane::<1>(s)
        + i32x4_extract_lane::<2>(s)
        + i32x4_extract_lane::<3>(s)
}

fn signed<W: SignedBlocks + SimdLevels>() -> KernelFns {
    KernelFns {
        act_type: GgmlType::Q8_0,
        quantize: quantize::q8_0,
        dot: |w, act| {
            let mut out = [0.0];
            signed_dot_many::<W>(w, act, &mut out);
            out[0]
        },
        dot_many: signed_dot_many::<W>,
    }
}

fn offset<W: OffsetBlocks + SimdLevels>() -> KernelFns {
    KernelFns {
        act_type: GgmlType::Q8_1,
        quantize: quantize::q8_1,
        dot: |w, act| {
            let mut out = [0.0];
            offset_dot_many::<W>(w, act, &mut out);
            out[0]
        },
        dot_many: offset_dot_many::<W>,
    }
}

fn signed_dot_many<W: SimdLevels>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    out.fill(0.0);
    let row_bytes = w.len() / W::BYTES * Q8_0_BYTES;
    for (ib, block) in w.chunks_exact(W::BYTES).enumerate() {
        let d = read_f16(block, 0);
        let levels = W::levels(block);
        for (r, sum) in out.iter_mut().enumerate() {
            let start = r * row_bytes + ib * Q8_0_BYTES;
            let a = &acts[start..start + Q8_0_BYTES];
            *sum += block_sum(levels, &a[2..]) as f32 * (d * read_f16(a, 0));
        }
    }
}

fn offset_dot_many<W: SimdLevels>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    out.fill(0.0);
    let row_bytes = w.len() / W::BYTES * Q8_1_BYTES;
    for (ib, block) in w.chunks_exact(W::BYTES).enumerate() {
        let (d, m) = (read_f16(block, 0), read_f16(block, 2));
        let levels = W::levels(block);
        for (r, sum) in out.iter_mut().enumerate() {
            let start = r * row_bytes + ib * Q8_1_BYTES;
            let a = &acts[start..start + Q8_1_BYTES];
            *sum += (d * read_f16(a, 0)) * block_sum(levels, &a[4..]) as f32 + m * read_f16(a, 2);
        }
    }
}
