//! How the NEON GEMMs of both families multiply: the integer sums of eight weight rows (a
//! panel) with a few activation rows, 16 elements (a *quarter*) at a time, and where each
//! weight byte lies in the panel for that. Also what both families share around it: how a
//! family's panel format becomes its [`GemmFns`] for either multiply ([`gemm_fns`]), and the
//! f32 accumulator of a panel's eight rows.
//!
//! Both multiplies take signed bytes on both sides and add their products into i32 lanes
//! exactly; they differ in arrangement:
//! - [`Sdot`] (dotprod): `sdot` by element, 4 activation bytes (one 32-bit lane of a 16-byte
//!   load) against 16 weight bytes, 4 elements of rows 4h..4h + 4, one lane per row. A chunk
//!   holds 4 elements of every row in turn; a quarter takes 8 `sdot` per activation row.
//! - [`Smmla`] (i8mm): `smmla`, a 2×8 by 8×2 matrix product: 8 elements of two weight rows
//!   against the same 8 elements of two activation rows, into the four lanes
//!   [r₀·t₀, r₀·t₁, r₁·t₀, r₁·t₁]. A chunk holds 8 elements of every row in turn (so each 16
//!   bytes are a row pair's); a quarter takes 8 `smmla` per *pair* of activation rows, half
//!   as many instructions as `sdot`, and the lanes are sorted back to rows once per sum. An
//!   odd activation row is paired with itself and its duplicate's lanes dropped.
//!
//! `vdotq_laneq_s32` and `vmmlaq_s32` are not stable in Rust yet, so both are written as
//! inline assembly.

use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

use crate::vec_dot::gemm::GemmFns;

/// Weight rows of a NEON panel: two registers of four i32 lanes.
pub(super) const ROWS: usize = 8;
/// Elements of a quarter, and the bytes of its panel values.
pub(super) const QUARTER: usize = 16;
pub(super) const QUARTER_BYTES: usize = QUARTER * ROWS;

/// One way of multiplying a panel's quarters with activation rows. See the module
/// documentation.
pub(super) trait Multiply {
    /// Elements of each row per chunk: a chunk holds this many elements of every row in turn.
    const ELEMENTS: usize;

    /// Where element `e` (of a quarter-aligned run of values) of row `r` lies.
    fn position(r: usize, e: usize) -> usize {
        e / Self::ELEMENTS * Self::ELEMENTS * ROWS + r * Self::ELEMENTS + e % Self::ELEMENTS
    }

    /// The sums over `quarters` of each activation row `acts[i]` with the panel `values`
    /// (rows 0–3, rows 4–7): quarter q's values at `values + QUARTER_BYTES · q`, its
    /// activation bytes at `acts[i] + QUARTER · q`. `#[inline(always)]`, so that it compiles
    /// into the caller's `#[target_feature]` function.
    ///
    /// # Safety
    /// Every quarter lies within `values` and every activation row; the CPU has the extension
    /// the multiply is written for.
    unsafe fn sums<const N: usize>(
        values: *const u8,
        acts: &[*const u8; N],
        quarters: Range<usize>,
    ) -> [[int32x4_t; 2]; N];
}

/// One NEON GEMM's panel format (a weight type in one family's packing), as [`gemm_fns`]
/// hands it out.
pub(super) trait NeonGemm {
    /// Bytes of one panel block (eight rows of one block or super-block).
    const PANEL_BYTES: usize;
    /// Bytes of one packed activation block.
    const ACT_BYTES: usize;

    /// Packs whole weight rows of `n_blocks` blocks, arranged for the multiply `M`.
    fn pack_panel<M: Multiply>(rows: &[u8], n_blocks: usize, out: &mut [u8]);

    /// Packs one quantized activation row.
    fn pack_act(act: &[u8], out: &mut [u8]);

    /// `out[t · ROWS + r] = row r · activation t`, multiplying with `M`. `#[inline(always)]`,
    /// so that it compiles into the `#[target_feature]` functions below.
    ///
    /// # Safety
    /// The panels were packed for `M`, and the CPU has the extension `M` is written for.
    unsafe fn run<M: Multiply>(panel: &[u8], acts: &[u8], out: &mut [f32]);
}

/// The GEMM of format `G` (the same panels whether packed for one product or kept); with
/// `i8mm`, the one that multiplies with `smmla`.
pub(super) fn gemm_fns<G: NeonGemm>(i8mm: bool) -> GemmFns {
    // SAFETY (both closures): a family's `gemm` is only reached through `DotKernel` for
    // Isa::NeonDotprod (without `i8mm`) or Isa::NeonI8mm (with it), which it hands out only
    // after `Isa::available()` confirmed at run time that this CPU has NEON and dotprod, and
    // for Isa::NeonI8mm also i8mm.
    if i8mm {
        GemmFns {
            pack_panel: G::pack_panel::<Smmla>,
            run: |panel, acts, out| unsafe { run_i8mm::<G>(panel, acts, out) },
            ..gemm_fns::<G>(false)
        }
    } else {
        GemmFns {
            panel_rows: ROWS,
            panel_bytes: |n_blocks| n_blocks * G::PANEL_BYTES,
            pack_panel: G::pack_panel::<Sdot>,
            act_bytes: |n_blocks| n_blocks * G::ACT_BYTES,
            pack_act: G::pack_act,
            run: |panel, acts, out| unsafe { run_dotprod::<G>(panel, acts, out) },
        }
    }
}

#[target_feature(enable = "neon,dotprod")]
unsafe fn run_dotprod<G: NeonGemm>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    G::run::<Sdot>(panel, acts, out)
}

#[target_feature(enable = "neon,dotprod,i8mm")]
unsafe fn run_i8mm<G: NeonGemm>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    G::run::<Smmla>(panel, acts, out)
}

/// The f32 sums of a panel's rows for one activation row: rows 0–3 and rows 4–7.
pub(super) type RowSums = [float32x4_t; 2];

#[inline(always)]
pub(super) unsafe fn zero_rows() -> RowSums {
    [vdupq_n_f32(0.0); 2]
}

#[inline(always)]
pub(super) unsafe fn store_rows(sums: RowSums, out: &mut [f32]) {
    let out = &mut out[..ROWS];
    vst1q_f32(out.as_mut_ptr(), sums[0]);
    vst1q_f32(out[4..].as_mut_ptr(), sums[1]);
}

/// `sdot` by element (dotprod).
pub(super) struct Sdot;
/// `smmla` (i8mm).
pub(super) struct Smmla;

impl Multiply for Sdot {
    const ELEMENTS: usize = 4;

    #[inline(always)]
    unsafe fn sums<const N: usize>(
        values: *const u8,
        acts: &[*const u8; N],
        quarters: Range<usize>,
    ) -> [[int32x4_t; 2]; N] {
        let mut sums = [[vdupq_n_s32(0); 2]; N];
        for q in quarters {
            let values = values.add(QUARTER_BYTES * q);
            // Chunk l of rows 4h..4h + 4.
            let w: [[int8x16_t; 4]; 2] = std::array::from_fn(|h| {
                std::array::from_fn(|l| vld1q_s8(values.add(32 * l + 16 * h).cast()))
            });
            // Indexed so that the loops unroll and the sums stay in registers.
            for i in 0..N {
                let a = vld1q_s8(acts[i].add(QUARTER * q).cast());
                for h in 0..2 {
                    sums[i][h] = sdot_lane::<0>(sums[i][h], w[h][0], a);
                    sums[i][h] = sdot_lane::<1>(sums[i][h], w[h][1], a);
                    sums[i][h] = sdot_lane::<2>(sums[i][h], w[h][2], a);
                    sums[i][h] = sdot_lane::<3>(sums[i][h], w[h][3], a);
                }
            }
        }
        sums
    }
}

impl Multiply for Smmla {
    const ELEMENTS: usize = 8;

    #[inline(always)]
    unsafe fn sums<const N: usize>(
        values: *const u8,
        acts: &[*const u8; N],
        quarters: Range<usize>,
    ) -> [[int32x4_t; 2]; N] {
        let mut sums = [[vdupq_n_s32(0); 2]; N];
        for i in (0..N).step_by(2) {
            let j = (i + 1).min(N - 1);
            // Row pair p's lanes [r₂ₚ·tᵢ, r₂ₚ·tⱼ, r₂ₚ₊₁·tᵢ, r₂ₚ₊₁·tⱼ].
            let mut pairs = [vdupq_n_s32(0); 4];
            for q in quarters.clone() {
                let values = values.add(QUARTER_BYTES * q);
                let ai = vreinterpretq_s64_s8(vld1q_s8(acts[i].add(QUARTER * q).cast()));
                let aj = vreinterpretq_s64_s8(vld1q_s8(acts[j].add(QUARTER * q).cast()));
                // Elements 0..8, then 8..16, of tᵢ and tⱼ.
                let a = [
                    vreinterpretq_s8_s64(vzip1q_s64(ai, aj)),
                    vreinterpretq_s8_s64(vzip2q_s64(ai, aj)),
                ];
                for (s, a) in a.into_iter().enumerate() {
                    for (p, pair) in pairs.iter_mut().enumerate() {
                        let w = vld1q_s8(values.add(64 * s + 16 * p).cast());
                        *pair = smmla(*pair, w, a);
                    }
                }
            }
            for h in 0..2 {
                let [lo, hi] = [pairs[2 * h], pairs[2 * h + 1]];
                sums[i][h] = vuzp1q_s32(lo, hi);
                if j > i {
                    sums[j][h] = vuzp2q_s32(lo, hi);
                }
            }
        }
        sums
    }
}

/// `acc[r] += Σₖ w[4r + k] · a[4·LANE + k]`.
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

/// `acc[2i + j] += Σₖ w[8i + k] · a[8j + k]`.
#[inline(always)]
unsafe fn smmla(mut acc: int32x4_t, w: int8x16_t, a: int8x16_t) -> int32x4_t {
    asm!(
        "smmla {acc:v}.4s, {w:v}.16b, {a:v}.16b",
        acc = inout(vreg) acc,
        w = in(vreg) w,
        a = in(vreg) a,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}
