//! The aarch64 activation quantizers and half conversions, for [`Isa::Neon`] and
//! [`Isa::NeonDotprod`].
//!
//! Each quantizer gives the same bytes as the scalar one in `quantize`: the block maximum is
//! exact whatever the order, the scales come from the same `q8_scales`, x·id is one IEEE
//! product either way, and `fcvtns` rounds half to even. Halves are converted with `fcvtl` /
//! `fcvtn` (base AdvSIMD, rounding to nearest even), written as inline assembly because
//! Rust's `vcvt_f32_f16` needs the unstable `f16` type. (For NaN inputs the bytes may differ
//! from the scalar quantizer's; those are unspecified.)

use std::arch::aarch64::*;
use std::arch::asm;

use super::formats::{Q8_0_BYTES, Q8_1_BYTES, QK};
use super::quantize::{self, q8_scales};

pub(super) fn q8_0(x: &[f32], out: &mut [u8]) {
    // SAFETY: only reachable through `KernelFns` of the aarch64 instruction sets, which
    // `DotKernel` hands out after `Isa::available()` confirmed NEON.
    unsafe { q8_0_neon(x, out) }
}

pub(super) fn q8_1(x: &[f32], out: &mut [u8]) {
    // SAFETY: as for `q8_0`.
    unsafe { q8_1_neon(x, out) }
}

/// f32 → f16, rounding to nearest even.
pub(super) fn f16(x: &[f32], out: &mut [u8]) {
    // SAFETY: as for `q8_0`.
    unsafe { f16_neon(x, out) }
}

/// f32 → bf16, ggml's rounding (nearest even, NaNs made quiet) in integer lanes.
pub(super) fn bf16(x: &[f32], out: &mut [u8]) {
    // SAFETY: as for `q8_0`.
    unsafe { bf16_neon(x, out) }
}

/// Four halves to f32 (exact).
#[inline(always)]
pub(super) unsafe fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
    let out: float32x4_t;
    asm!(
        "fcvtl {out:v}.4s, {h:v}.4h",
        h = in(vreg) h,
        out = lateout(vreg) out,
        options(pure, nomem, nostack, preserves_flags)
    );
    out
}

/// Four f32 to halves, rounding to nearest even.
#[inline(always)]
unsafe fn f32x4_to_f16(x: float32x4_t) -> uint16x4_t {
    let out: uint16x4_t;
    asm!(
        "fcvtn {out:v}.4h, {x:v}.4s",
        x = in(vreg) x,
        out = lateout(vreg) out,
        options(pure, nomem, nostack, preserves_flags)
    );
    out
}

/// `d` as a little-endian f16 (d is never NaN for finite activations).
#[inline(always)]
unsafe fn f16_bytes(d: f32) -> [u8; 2] {
    vget_lane_u16::<0>(f32x4_to_f16(vdupq_n_f32(d))).to_le_bytes()
}

/// One block: its scale d and its quants as i32 lanes, in order.
#[inline(always)]
unsafe fn q8_block(x: &[f32]) -> (f32, [int32x4_t; 8]) {
    let x = &x[..QK];
    let mut v = [vdupq_n_f32(0.0); 8];
    for (i, v) in v.iter_mut().enumerate() {
        *v = vld1q_f32(x[4 * i..].as_ptr());
    }
    let mut m = vabsq_f32(v[0]);
    for &v in &v[1..] {
        m = vmaxq_f32(m, vabsq_f32(v));
    }
    let (d, id) = q8_scales(vmaxvq_f32(m));
    let mut q = [vdupq_n_s32(0); 8];
    for (q, &v) in q.iter_mut().zip(&v) {
        *q = vcvtnq_s32_f32(vmulq_n_f32(v, id));
    }
    (d, q)
}

/// The 32 quants as bytes, in order (the narrowing saturates, but |q| ≤ 127).
#[inline(always)]
unsafe fn store_quants(q: &[int32x4_t; 8], out: &mut [u8]) {
    let out = &mut out[..QK];
    for (i, q) in q.chunks_exact(4).enumerate() {
        let lo = vcombine_s16(vqmovn_s32(q[0]), vqmovn_s32(q[1]));
        let hi = vcombine_s16(vqmovn_s32(q[2]), vqmovn_s32(q[3]));
        let bytes = vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi));
        vst1q_s8(out[16 * i..].as_mut_ptr().cast(), bytes);
    }
}

#[target_feature(enable = "neon")]
unsafe fn q8_0_neon(x: &[f32], out: &mut [u8]) {
    for (x, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let (d, q) = q8_block(x);
        b[..2].copy_from_slice(&f16_bytes(d));
        store_quants(&q, &mut b[2..]);
    }
}

#[target_feature(enable = "neon")]
unsafe fn q8_1_neon(x: &[f32], out: &mut [u8]) {
    for (x, b) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
        let (d, q) = q8_block(x);
        b[..2].copy_from_slice(&f16_bytes(d));
        let mut sum = q[0];
        for &q in &q[1..] {
            sum = vaddq_s32(sum, q);
        }
        b[2..4].copy_from_slice(&f16_bytes(d * vaddvq_s32(sum) as f32));
        store_quants(&q, &mut b[4..]);
    }
}

#[target_feature(enable = "neon")]
unsafe fn f16_neon(x: &[f32], out: &mut [u8]) {
    let mut xs = x.chunks_exact(4);
    let mut outs = out.chunks_exact_mut(8);
    for (x, o) in (&mut xs).zip(&mut outs) {
        vst1_u16(o.as_mut_ptr().cast(), f32x4_to_f16(vld1q_f32(x.as_ptr())));
    }
    quantize::f16(xs.remainder(), outs.into_remainder());
}

#[target_feature(enable = "neon")]
unsafe fn bf16_neon(x: &[f32], out: &mut [u8]) {
    let mut xs = x.chunks_exact(4);
    let mut outs = out.chunks_exact_mut(8);
    for (x, o) in (&mut xs).zip(&mut outs) {
        let u = vld1q_u32(x.as_ptr().cast());
        let lsb = vandq_u32(vshrq_n_u32::<16>(u), vdupq_n_u32(1));
        let rounded = vshrq_n_u32::<16>(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), lsb)));
        let magnitude = vandq_u32(u, vdupq_n_u32(0x7FFF_FFFF));
        let nan = vcgtq_u32(magnitude, vdupq_n_u32(0x7F80_0000));
        let quiet = vorrq_u32(vshrq_n_u32::<16>(u), vdupq_n_u32(64));
        let bits = vbslq_u32(nan, quiet, rounded);
        vst1_u16(o.as_mut_ptr().cast(), vmovn_u32(bits));
    }
    quantize::bf16(xs.remainder(), outs.into_remainder());
}
