//! aarch64 kernels ([`Isa::Neon`] and [`Isa::NeonDotprod`]): blocks taken two at a time,
//! each as two 16-byte registers.
//!
//! Integer types: a pair of weight blocks is unpacked once to signed bytes and used for up to
//! four activation rows. Each block's products are summed into 4 i32 lanes, by `sdot` with
//! dotprod (written as inline assembly: `vdotq_s32` is not stable in Rust yet) or by `smull`
//! and `sadalp` without it. The lanes are converted once per block and scaled by d_w·d_a
//! with a lane-indexed FMA, block A and block B of a pair into two accumulators per row.
//!
//! Float types: each row's products are summed by FMA into four accumulators of 4 f32 lanes,
//! the weights converted to f32 once for four rows.

use std::arch::aarch64::*;
use std::arch::asm;

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES,
};
use super::neon_quantize::{self, f16x4_to_f32};
use super::quantize;
use super::rows::{block_count, dot_many, RowKernel};
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{KernelFns, QuantizeFn};
use crate::GgmlType;

/// Rows of `dot_many` computed together with one unpacked weight pair.
const ROWS: usize = 4;
/// Rows per float weight conversion: four rows of four accumulators.
const FLOAT_ROWS: usize = 4;

pub(super) fn kernel(weight_type: GgmlType, dotprod: bool) -> Option<KernelFns> {
    use GgmlType as T;
    let q8_0: (GgmlType, QuantizeFn) = (T::Q8_0, neon_quantize::q8_0);
    let q8_1: (GgmlType, QuantizeFn) = (T::Q8_1, neon_quantize::q8_1);
    // The float types have no byte products: both instruction sets share one kernel.
    Some(match (weight_type, dotprod) {
        (T::Q4_0, false) => fns::<Signed<Q4_0, Mull>, ROWS>(q8_0),
        (T::Q4_0, true) => fns::<Signed<Q4_0, Sdot>, ROWS>(q8_0),
        (T::Q5_0, false) => fns::<Signed<Q5_0, Mull>, ROWS>(q8_0),
        (T::Q5_0, true) => fns::<Signed<Q5_0, Sdot>, ROWS>(q8_0),
        (T::Q8_0, false) => fns::<Signed<Q8_0, Mull>, ROWS>(q8_0),
        (T::Q8_0, true) => fns::<Signed<Q8_0, Sdot>, ROWS>(q8_0),
        (T::IQ4_NL, false) => fns::<Signed<Iq4Nl, Mull>, ROWS>(q8_0),
        (T::IQ4_NL, true) => fns::<Signed<Iq4Nl, Sdot>, ROWS>(q8_0),
        (T::Q4_1, false) => fns::<Offset<Q4_1, Mull>, ROWS>(q8_1),
        (T::Q4_1, true) => fns::<Offset<Q4_1, Sdot>, ROWS>(q8_1),
        (T::Q5_1, false) => fns::<Offset<Q5_1, Mull>, ROWS>(q8_1),
        (T::Q5_1, true) => fns::<Offset<Q5_1, Sdot>, ROWS>(q8_1),
        (T::F16, _) => fns::<Float<F16Lanes>, FLOAT_ROWS>((T::F16, neon_quantize::f16)),
        (T::BF16, _) => fns::<Float<Bf16Lanes>, FLOAT_ROWS>((T::BF16, neon_quantize::bf16)),
        (T::F32, _) => fns::<Float<F32Lanes>, FLOAT_ROWS>((T::F32, quantize::f32)),
        _ => return None,
    })
}

/// A kernel of this file: whether it needs dotprod decides which entry points run it.
trait NeonKernel: RowKernel {
    const DOTPROD: bool;
}

fn fns<K: NeonKernel, const G: usize>((act_type, quantize): (GgmlType, QuantizeFn)) -> KernelFns {
    // SAFETY (all four closures): `kernel` is only reached through `DotKernel` for Isa::Neon
    // or Isa::NeonDotprod, which it hands out only after `Isa::available()` confirmed at run
    // time that this CPU has NEON, and for Isa::NeonDotprod also dotprod; `kernel` picks
    // kernels with K::DOTPROD only for NeonDotprod.
    if K::DOTPROD {
        KernelFns {
            act_type,
            quantize,
            dot: |w, act| unsafe { dot_dotprod::<K>(w, act) },
            dot_many: |w, acts, out| unsafe { dot_many_dotprod::<K, G>(w, acts, out) },
        }
    } else {
        KernelFns {
            act_type,
            quantize,
            dot: |w, act| unsafe { dot_neon::<K>(w, act) },
            dot_many: |w, acts, out| unsafe { dot_many_neon::<K, G>(w, acts, out) },
        }
    }
}

#[target_feature(enable = "neon")]
unsafe fn dot_neon<K: RowKernel>(w: &[u8], act: &[u8]) -> f32 {
    K::rows::<1>(w, [act])[0]
}

#[target_feature(enable = "neon")]
unsafe fn dot_many_neon<K: RowKernel, const G: usize>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    dot_many::<K, G>(w, acts, out)
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_dotprod<K: RowKernel>(w: &[u8], act: &[u8]) -> f32 {
    K::rows::<1>(w, [act])[0]
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn dot_many_dotprod<K: RowKernel, const G: usize>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    dot_many::<K, G>(w, acts, out)
}

/// How the products of 16 signed byte pairs are added to 4 i32 lanes (four adjacent
/// products per lane for `sdot`; any grouping will do, only the block's total is used).
trait ByteDot {
    const DOTPROD: bool;
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
}

/// Plain NEON: products widened to i16 (|a·b| ≤ 128·128 fits), pairs added into i32.
struct Mull;
struct Sdot;

impl ByteDot for Mull {
    const DOTPROD: bool = false;
    #[inline(always)]
    unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        let acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
        vpadalq_s16(acc, vmull_high_s8(a, b))
    }
}

impl ByteDot for Sdot {
    const DOTPROD: bool = true;
    #[inline(always)]
    unsafe fn dot(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
        asm!(
            "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
            acc = inout(vreg) acc,
            a = in(vreg) a,
            b = in(vreg) b,
            options(pure, nomem, nostack, preserves_flags)
        );
        acc
    }
}

/// A block's 32 values as two registers: elements 0..16 and 16..32.
type Block = [int8x16_t; 2];

/// The 16-byte nibble array at `p`: low nibbles (elements 0..16), high nibbles (16..32).
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> [uint8x16_t; 2] {
    let x = vld1q_u8(p);
    [vandq_u8(x, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(x)]
}

/// The fifth bits of a block (bit j of the little-endian u32 at `p` for element j), as 0x10
/// or 0 per element: elements 0..16, then 16..32.
#[inline(always)]
unsafe fn fifth_bits(p: *const u8) -> [uint8x16_t; 2] {
    let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le(p.cast::<u32>().read_unaligned())));
    [fifth_bits_of(qh, 0), fifth_bits_of(qh, 2)]
}

/// Elements j = 8·byte .. 8·byte + 16: bit j % 8 of byte j / 8 of `qh`.
#[inline(always)]
unsafe fn fifth_bits_of(qh: uint8x16_t, byte: u8) -> uint8x16_t {
    let spread = vcombine_u8(vdup_n_u8(byte), vdup_n_u8(byte + 1));
    let bytes = vqtbl1q_u8(qh, spread);
    let bit = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
    vandq_u8(vtstq_u8(bytes, bit), vdupq_n_u8(0x10))
}

/// The halves at `p` and `p + stride` (two each if `PAIRS`), as f32 lanes: [a, b] or
/// [a0, a1, b0, b1].
#[inline(always)]
unsafe fn f16_lanes<const PAIRS: bool>(p: *const u8, stride: usize) -> float32x4_t {
    let bits = if PAIRS {
        let a = u64::from(u32::from_le(p.cast::<u32>().read_unaligned()));
        let b = u64::from(u32::from_le(p.add(stride).cast::<u32>().read_unaligned()));
        a | b << 32
    } else {
        let a = u64::from(u16::from_le(p.cast::<u16>().read_unaligned()));
        let b = u64::from(u16::from_le(p.add(stride).cast::<u16>().read_unaligned()));
        a | b << 16
    };
    f16x4_to_f32(vcreate_u16(bits))
}

/// A signed weight format, read one block at a time.
trait SignedBlock: SignedBlocks {
    /// The 32 signed values of the block at `p`.
    unsafe fn values(p: *const u8) -> Block;
}

impl SignedBlock for Q4_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> Block {
        let [lo, hi] = nibbles(p.add(2));
        let eight = vdupq_n_s8(8);
        [
            vsubq_s8(vreinterpretq_s8_u8(lo), eight),
            vsubq_s8(vreinterpretq_s8_u8(hi), eight),
        ]
    }
}

impl SignedBlock for Q5_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> Block {
        let [lo, hi] = nibbles(p.add(6));
        let [flo, fhi] = fifth_bits(p.add(2));
        let sixteen = vdupq_n_s8(16);
        [
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, flo)), sixteen),
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, fhi)), sixteen),
        ]
    }
}

impl SignedBlock for Q8_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> Block {
        [vld1q_s8(p.add(2).cast()), vld1q_s8(p.add(18).cast())]
    }
}

impl SignedBlock for Iq4Nl {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> Block {
        let [lo, hi] = nibbles(p.add(2));
        let levels = vld1q_s8(KVALUES_IQ4NL.as_ptr());
        [vqtbl1q_s8(levels, lo), vqtbl1q_s8(levels, hi)]
    }
}

/// The sum of a weight block's products with an activation block's quants at `a`, as f32
/// lanes.
#[inline(always)]
unsafe fn block_dot<D: ByteDot>(w: &Block, a: *const u8) -> float32x4_t {
    let sums = D::dot(vdupq_n_s32(0), w[0], vld1q_s8(a.cast()));
    vcvtq_f32_s32(D::dot(sums, w[1], vld1q_s8(a.add(16).cast())))
}

/// Room for two blocks of any type of this family.
const PAIR_BYTES: usize = 2 * Q8_1_BYTES;

/// Signed weights against Q8_0 activations.
struct Signed<W, D>(W, D);

impl<W: SignedBlock, D: ByteDot> Signed<W, D> {
    /// Adds the pair of blocks at `w` (two weight blocks) and `acts[r]` (two Q8_0 blocks) to
    /// row r's accumulators.
    #[inline(always)]
    unsafe fn pair<const R: usize>(
        w: *const u8,
        acts: [*const u8; R],
        acc: &mut [[float32x4_t; 2]; R],
    ) {
        let va = W::values(w);
        let vb = W::values(w.add(W::BYTES));
        let d = vget_low_f32(f16_lanes::<false>(w, W::BYTES));
        // Indexed so that the loop unrolls and the accumulators stay in registers.
        for r in 0..R {
            let a = acts[r];
            let scales = vmul_f32(d, vget_low_f32(f16_lanes::<false>(a, Q8_0_BYTES)));
            let sa = block_dot::<D>(&va, a.add(2));
            let sb = block_dot::<D>(&vb, a.add(Q8_0_BYTES + 2));
            acc[r][0] = vfmaq_lane_f32::<0>(acc[r][0], sa, scales);
            acc[r][1] = vfmaq_lane_f32::<1>(acc[r][1], sb, scales);
        }
    }
}

impl<W: SignedBlock, D: ByteDot> NeonKernel for Signed<W, D> {
    const DOTPROD: bool = D::DOTPROD;
}

impl<W: SignedBlock, D: ByteDot> RowKernel for Signed<W, D> {
    const W_BYTES: usize = W::BYTES;
    const A_BYTES: usize = Q8_0_BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let nb = block_count(w, W::BYTES, &acts, Q8_0_BYTES);
        let mut acc = [[vdupq_n_f32(0.0); 2]; R];
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
        let mut out = [0.0; R];
        for r in 0..R {
            out[r] = vaddvq_f32(vaddq_f32(acc[r][0], acc[r][1]));
        }
        out
    }
}

/// An offset weight format, read one block at a time.
trait OffsetBlock: OffsetBlocks {
    /// The 32 unsigned values (0..32) of the block at `p`, as signed bytes.
    unsafe fn values(p: *const u8) -> Block;
}

impl OffsetBlock for Q4_1 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> Block {
        let [lo, hi] = nibbles(p.add(4));
        [vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi)]
    }
}

impl OffsetBlock for Q5_1 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> Block {
        let [lo, hi] = nibbles(p.add(8));
        let [flo, fhi] = fifth_bits(p.add(4));
        [
            vreinterpretq_s8_u8(vorrq_u8(lo, flo)),
            vreinterpretq_s8_u8(vorrq_u8(hi, fhi)),
        ]
    }
}

/// Offset weights against Q8_1 activations: d_w·d_a·Σq·y per block, plus m·s, whose sum is
/// kept apart in lanes 1 and 3 of a third accumulator.
struct Offset<W, D>(W, D);

impl<W: OffsetBlock, D: ByteDot> Offset<W, D> {
    #[inline(always)]
    unsafe fn pair<const R: usize>(
        w: *const u8,
        acts: [*const u8; R],
        acc: &mut [[float32x4_t; 3]; R],
    ) {
        let va = W::values(w);
        let vb = W::values(w.add(W::BYTES));
        // [d, m] of both blocks.
        let dm = f16_lanes::<true>(w, W::BYTES);
        for r in 0..R {
            let a = acts[r];
            // [d·d_a, m·s] of both blocks.
            let products = vmulq_f32(dm, f16_lanes::<true>(a, Q8_1_BYTES));
            let sa = block_dot::<D>(&va, a.add(4));
            let sb = block_dot::<D>(&vb, a.add(Q8_1_BYTES + 4));
            acc[r][0] = vfmaq_laneq_f32::<0>(acc[r][0], sa, products);
            acc[r][1] = vfmaq_laneq_f32::<2>(acc[r][1], sb, products);
            acc[r][2] = vaddq_f32(acc[r][2], products);
        }
    }
}

impl<W: OffsetBlock, D: ByteDot> NeonKernel for Offset<W, D> {
    const DOTPROD: bool = D::DOTPROD;
}

impl<W: OffsetBlock, D: ByteDot> RowKernel for Offset<W, D> {
    const W_BYTES: usize = W::BYTES;
    const A_BYTES: usize = Q8_1_BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let nb = block_count(w, W::BYTES, &acts, Q8_1_BYTES);
        let mut acc = [[vdupq_n_f32(0.0); 3]; R];
        for i in (0..nb & !1).step_by(2) {
            // SAFETY: blocks i and i + 1 lie within `w` and every row (i + 1 < nb).
            let a = acts.map(|a| a.as_ptr().add(i * Q8_1_BYTES));
            Self::pair(w.as_ptr().add(i * W::BYTES), a, &mut acc);
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
            Self::pair(wp.as_ptr(), ap.each_ref().map(|b| b.as_ptr()), &mut acc);
        }
        let mut out = [0.0; R];
        for r in 0..R {
            let [a, b, offsets] = acc[r];
            let offset = vgetq_lane_f32::<1>(offsets) + vgetq_lane_f32::<3>(offsets);
            out[r] = vaddvq_f32(vaddq_f32(a, b)) + offset;
        }
        out
    }
}

/// A float format, read 8 elements at a time as two registers of f32 lanes.
trait FloatLanes {
    const BYTES: usize;
    unsafe fn load(p: *const u8) -> [float32x4_t; 2];
}

struct F16Lanes;
struct Bf16Lanes;
struct F32Lanes;

impl FloatLanes for F16Lanes {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> [float32x4_t; 2] {
        let h = vld1q_u16(p.cast());
        [
            f16x4_to_f32(vget_low_u16(h)),
            f16x4_to_f32(vget_high_u16(h)),
        ]
    }
}

impl FloatLanes for Bf16Lanes {
    const BYTES: usize = 2;
    /// bf16 is the high half of an f32.
    #[inline(always)]
    unsafe fn load(p: *const u8) -> [float32x4_t; 2] {
        let h = vld1q_u16(p.cast());
        [
            vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
            vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
        ]
    }
}

impl FloatLanes for F32Lanes {
    const BYTES: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> [float32x4_t; 2] {
        [vld1q_f32(p.cast()), vld1q_f32(p.add(16).cast())]
    }
}

/// Float weights against activations of the same type.
struct Float<F>(F);

impl<F: FloatLanes> NeonKernel for Float<F> {
    const DOTPROD: bool = false;
}

/// The first `n` < 8 elements of `row` from element `from`, zero-padded to 8 in a copy that
/// a full load may read.
#[inline(always)]
fn padded<F: FloatLanes>(row: &[u8], from: usize, n: usize) -> [u8; 32] {
    let mut buf = [0u8; 32];
    buf[..n * F::BYTES].copy_from_slice(&row[from * F::BYTES..(from + n) * F::BYTES]);
    buf
}

impl<F: FloatLanes> RowKernel for Float<F> {
    const W_BYTES: usize = F::BYTES;
    const A_BYTES: usize = F::BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let n = block_count(w, F::BYTES, &acts, F::BYTES);
        let at = |p: &[u8], i: usize| p.as_ptr().add(i * F::BYTES);
        let mut acc = [[vdupq_n_f32(0.0); 4]; R];
        let mut i = 0;
        // SAFETY (all loads): elements i..i + 16 (or i + 8) lie within `w` and every row,
        // which hold n elements.
        while i + 16 <= n {
            let [w0, w1] = F::load(at(w, i));
            let [w2, w3] = F::load(at(w, i + 8));
            for r in 0..R {
                let [a0, a1] = F::load(at(acts[r], i));
                let [a2, a3] = F::load(at(acts[r], i + 8));
                acc[r][0] = vfmaq_f32(acc[r][0], w0, a0);
                acc[r][1] = vfmaq_f32(acc[r][1], w1, a1);
                acc[r][2] = vfmaq_f32(acc[r][2], w2, a2);
                acc[r][3] = vfmaq_f32(acc[r][3], w3, a3);
            }
            i += 16;
        }
        while i + 8 <= n {
            let [w0, w1] = F::load(at(w, i));
            for r in 0..R {
                let [a0, a1] = F::load(at(acts[r], i));
                acc[r][0] = vfmaq_f32(acc[r][0], w0, a0);
                acc[r][1] = vfmaq_f32(acc[r][1], w1, a1);
            }
            i += 8;
        }
        if i < n {
            let [w0, w1] = F::load(padded::<F>(w, i, n - i).as_ptr());
            for r in 0..R {
                let [a0, a1] = F::load(padded::<F>(acts[r], i, n - i).as_ptr());
                acc[r][0] = vfmaq_f32(acc[r][0], w0, a0);
                acc[r][1] = vfmaq_f32(acc[r][1], w1, a1);
            }
        }
        let mut out = [0.0; R];
        for r in 0..R {
            let [a, b, c, d] = acc[r];
            out[r] = vaddvq_f32(vaddq_f32(vaddq_f32(a, b), vaddq_f32(c, d)));
        }
        out
    }
}
