//! `sdot` by element, the multiply of the NEON GEMMs of both families: 4 signed activation
//! bytes (one 32-bit lane of a register) against 16 signed weight bytes (4 elements of 4
//! rows), each row's 4 products added into its i32 lane. `vdotq_laneq_s32` is not stable in
//! Rust yet, so it is written as inline assembly.

use std::arch::aarch64::*;
use std::arch::asm;

/// `acc[r] += Σₖ w[c][4r + k] · a[4c + k]` for the four chunks `w[c]` and the 16 activation
/// bytes `a`: chunk c meets activation lane c.
///
/// # Safety
/// The CPU has the dot-product extension; the caller is a `#[target_feature(enable =
/// "dotprod")]` function (this one is `#[inline(always)]`).
#[inline(always)]
pub(super) unsafe fn sdot_lanes(acc: int32x4_t, w: &[int8x16_t; 4], a: int8x16_t) -> int32x4_t {
    let acc = sdot_lane::<0>(acc, w[0], a);
    let acc = sdot_lane::<1>(acc, w[1], a);
    let acc = sdot_lane::<2>(acc, w[2], a);
    sdot_lane::<3>(acc, w[3], a)
}

#[inline(always)]
unsafe fn sdot_lane<const LANE: i32>(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    asm!(
        "sdot {acc:v}.4s, {w:v}.16b, {a:v}.4b[{lane}]",
        acc = inout(vreg) acc,
        w = in(vreg) w,
        a = in(vreg) a,
        lane = const LANE,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}
