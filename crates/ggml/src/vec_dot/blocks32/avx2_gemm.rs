//! The AVX2 GEMM ([`crate::vec_dot::gemm`]) of the 32-element block types against Q8_0 and
//! Q8_1 activations, for the CPUs without VNNI (and those with AVX-512 but not VNNI).
//!
//! A panel holds eight weight rows, one i32 lane of a 256-bit register each. A panel block is
//! eight 32-byte chunks, chunk c holding elements 4c..4c + 4 of every row in turn, so that
//! broadcasting elements 4c..4c + 4 of an activation block against chunk c multiplies them
//! with every row's at once. The rows' f16 scales follow (and Q4_1's and Q5_1's f16 mins).
//!
//! `vpmaddubsw` multiplies unsigned by signed bytes and adds each pair of products into an
//! i16 lane, saturating; `vpmaddwd` against ones then adds the pairs of each row into its
//! i32 lane. How the operands are made to fit, per [`Form`]:
//! - [`Form::ShiftedActs`] (Q4_0, Q5_0: |w| ≤ 16): the activations plus 128 (1..=255) are
//!   the unsigned operand, the weights the signed one. Σ(y + 128)·w = Σy·w + 128·Σw, so each
//!   panel block carries −128·Σw per row as the i32 sums' starting value. A pair of products
//!   is at most 2·255·16 = 8160 in magnitude, so four chunks' pairs add up in i16.
//! - [`Form::SignedActs`] (Q8_0, IQ4_NL: |w| ≤ 128): the weights' magnitudes are the
//!   unsigned operand and the activations, given the weights' signs with `vpsignb`, the
//!   signed one (as ggml's AVX2 kernels do). A pair reaches 2·128·127, so every chunk goes
//!   to i32 on its own.
//! - [`Form::Offset`] (Q4_1, Q5_1, against Q8_1): the levels 0..32 are the unsigned operand
//!   and the activations the signed one, at most 2·31·128 per pair; the offset's share m·s
//!   is one more FMA per block, the activation block carrying s as f32.
//!
//! With AVX-VNNI ([`crate::Isa::Avx2Vnni`]) the same panels and activations meet in `vpdpbusd`,
//! which adds four products into an i32 lane without saturating: one instruction per chunk.
//!
//! Each packed activation block is its 32 values (plus 128 for [`Form::ShiftedActs`]), its
//! scale as f32 and, for [`Form::Offset`], s as f32. Integer sums are exact: outputs differ
//! from [`crate::DotKernel::dot`] only in the order their per-block f32 terms add up.
//!
//! The walk over blocks and activation rows is the one the x86 GEMMs share
//! ([`crate::vec_dot::panel_walk`]).

use std::arch::x86_64::*;

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES, QK,
};
use crate::fp::read_f16;
use crate::vec_dot::gemm::GemmFns;
use crate::vec_dot::panel_walk::{self, PanelBlocks};
use crate::GgmlType;

/// Weight rows per panel: one i32 lane each fills a 256-bit register.
const ROWS: usize = 8;
/// Chunks of a block (four elements of every row each), and bytes of one.
const CHUNKS: usize = QK / 4;
const CHUNK: usize = 4 * ROWS;
/// Bytes of a panel block's values.
const VALUES: usize = CHUNKS * CHUNK;
/// Activation rows walked together: their sums and a block's chunks fit the 16 registers.
const GROUP: usize = 4;

/// The GEMM of `weight_type` (the same panels whether packed for one product or kept); with
/// `vnni`, the one that multiplies with AVX-VNNI.
pub(super) fn gemm(weight_type: GgmlType, vnni: bool) -> Option<GemmFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q4_0 => fns::<Narrow<Q4_0>>(vnni),
        T::Q5_0 => fns::<Narrow<Q5_0>>(vnni),
        T::Q8_0 => fns::<Wide<Q8_0>>(vnni),
        T::IQ4_NL => fns::<Wide<Iq4Nl>>(vnni),
        T::Q4_1 => fns::<Offset<Q4_1, 8>>(vnni),
        T::Q5_1 => fns::<Offset<Q5_1, 4>>(vnni),
        _ => return None,
    })
}

fn fns<F: Format>(vnni: bool) -> GemmFns {
    // SAFETY (both closures): `gemm` is only reached through `DotKernel` for Isa::Avx2,
    // Isa::Avx512 and Isa::Avx512Vnni (without `vnni`) or Isa::Avx2Vnni (with it), which it
    // hands out only after `Isa::available()` confirmed at run time that this CPU has AVX2,
    // FMA and F16C, and for Isa::Avx2Vnni AVX-VNNI.
    GemmFns {
        panel_rows: ROWS,
        panel_bytes: |n_blocks| n_blocks * Layout::<F>::BLOCK_BYTES,
        pack_panel: pack_panel::<F>,
        act_bytes: |n_blocks| n_blocks * Layout::<F>::ACT_BYTES,
        pack_act: pack_act::<F>,
        run: if vnni {
            |panel, acts, out| unsafe { run_vnni::<F>(panel, acts, out) }
        } else {
            |panel, acts, out| unsafe { run::<F>(panel, acts, out) }
        },
    }
}

/// How a weight type's values and the activations become `vpmaddubsw`'s operands (see the
/// module documentation).
enum Form {
    ShiftedActs,
    SignedActs,
    Offset,
}

/// One weight type as this GEMM packs it.
trait Format {
    const FORM: Form;
    /// Bytes of one weight block.
    const BYTES: usize;
    /// Chunks whose pairs of products one i16 lane adds up without overflow; divides
    /// [`CHUNKS`].
    const CHUNKS_PER_SUM: usize;
    /// The block's 32 values as panel bytes (signed values as their two's complement).
    fn values(block: &[u8]) -> [u8; QK];
}

/// Signed weights of magnitude at most 16.
struct Narrow<W>(W);
/// Signed weights of any magnitude.
struct Wide<W>(W);
/// Offset weights, `CHUNKS_PER_SUM` chunks per i16 sum: 8 for levels below 16, 4 below 32.
struct Offset<W, const CHUNKS_PER_SUM: usize>(W);

fn signed_bytes<W: SignedBlocks>(block: &[u8]) -> [u8; QK] {
    W::unpack(block).1.map(|v| v as u8)
}

impl<W: SignedBlocks> Format for Narrow<W> {
    const FORM: Form = Form::ShiftedActs;
    const BYTES: usize = W::BYTES;
    const CHUNKS_PER_SUM: usize = 4;
    fn values(block: &[u8]) -> [u8; QK] {
        signed_bytes::<W>(block)
    }
}

impl<W: SignedBlocks> Format for Wide<W> {
    const FORM: Form = Form::SignedActs;
    const BYTES: usize = W::BYTES;
    const CHUNKS_PER_SUM: usize = 1;
    fn values(block: &[u8]) -> [u8; QK] {
        signed_bytes::<W>(block)
    }
}

impl<W: OffsetBlocks, const N: usize> Format for Offset<W, N> {
    const FORM: Form = Form::Offset;
    const BYTES: usize = W::BYTES;
    const CHUNKS_PER_SUM: usize = N;
    fn values(block: &[u8]) -> [u8; QK] {
        W::unpack(block).2
    }
}

/// The byte layout of a panel block of format `F` (its values, for [`Form::ShiftedActs`] the
/// rows' i32 corrections, the rows' f16 scales, for [`Form::Offset`] their f16 mins) and of a
/// packed activation block (its 32 values, f32 scale, for [`Form::Offset`] f32 s).
struct Layout<F>(F);

impl<F: Format> Layout<F> {
    const CORRECTIONS: usize = VALUES;
    const SCALES: usize = VALUES
        + if matches!(F::FORM, Form::ShiftedActs) {
            4 * ROWS
        } else {
            0
        };
    const MINS: usize = Self::SCALES + 2 * ROWS;
    const BLOCK_BYTES: usize = Self::MINS
        + if matches!(F::FORM, Form::Offset) {
            2 * ROWS
        } else {
            0
        };
    const ACT_SCALE: usize = QK;
    const ACT_S: usize = QK + 4;
    const ACT_BYTES: usize = QK
        + if matches!(F::FORM, Form::Offset) {
            8
        } else {
            4
        };
}

fn pack_panel<F: Format>(rows: &[u8], n_blocks: usize, out: &mut [u8]) {
    let block_bytes = Layout::<F>::BLOCK_BYTES;
    let out = &mut out[..n_blocks * block_bytes];
    out.fill(0);
    let row_bytes = n_blocks * F::BYTES;
    for (r, row) in rows.chunks_exact(row_bytes.max(1)).take(ROWS).enumerate() {
        for (block, o) in row
            .chunks_exact(F::BYTES)
            .zip(out.chunks_exact_mut(block_bytes))
        {
            let values = F::values(block);
            for (c, four) in values.chunks_exact(4).enumerate() {
                o[c * CHUNK + 4 * r..][..4].copy_from_slice(four);
            }
            if matches!(F::FORM, Form::ShiftedActs) {
                let sum: i32 = values.iter().map(|&v| i32::from(v as i8)).sum();
                o[Layout::<F>::CORRECTIONS + 4 * r..][..4]
                    .copy_from_slice(&(-128 * sum).to_le_bytes());
            }
            // Every block starts with its f16 scale; Q4_1's and Q5_1's min follows.
            o[Layout::<F>::SCALES + 2 * r..][..2].copy_from_slice(&block[..2]);
            if matches!(F::FORM, Form::Offset) {
                o[Layout::<F>::MINS + 2 * r..][..2].copy_from_slice(&block[2..4]);
            }
        }
    }
}

fn pack_act<F: Format>(act: &[u8], out: &mut [u8]) {
    let (in_bytes, values_at) = match F::FORM {
        Form::Offset => (Q8_1_BYTES, 4),
        _ => (Q8_0_BYTES, 2),
    };
    for (block, o) in act
        .chunks_exact(in_bytes)
        .zip(out.chunks_exact_mut(Layout::<F>::ACT_BYTES))
    {
        for (o, &q) in o[..QK].iter_mut().zip(&block[values_at..]) {
            *o = if matches!(F::FORM, Form::ShiftedActs) {
                q ^ 0x80
            } else {
                q
            };
        }
        let d = read_f16(block, 0);
        o[Layout::<F>::ACT_SCALE..][..4].copy_from_slice(&d.to_le_bytes());
        if matches!(F::FORM, Form::Offset) {
            let s = read_f16(block, 2);
            o[Layout::<F>::ACT_S..][..4].copy_from_slice(&s.to_le_bytes());
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn run<F: Format>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<Panel<F, false>, GROUP>(panel, acts, out)
}

#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
unsafe fn run_vnni<F: Format>(panel: &[u8], acts: &[u8], out: &mut [f32]) {
    panel_walk::run::<Panel<F, true>, GROUP>(panel, acts, out)
}

/// The four bytes at `p` in every 32-bit lane.
#[inline(always)]
unsafe fn bytes4(p: *const u8) -> __m256i {
    _mm256_set1_epi32(p.cast::<i32>().read_unaligned())
}

#[inline(always)]
unsafe fn f32_at(p: *const u8) -> f32 {
    p.cast::<f32>().read_unaligned()
}

/// The panels of format `F` as the walk sees them; with `VNNI`, multiplied with AVX-VNNI.
struct Panel<F, const VNNI: bool>(F);

impl<F: Format, const VNNI: bool> PanelBlocks for Panel<F, VNNI> {
    const ROWS: usize = ROWS;
    const PANEL_BYTES: usize = Layout::<F>::BLOCK_BYTES;
    const ACT_BYTES: usize = Layout::<F>::ACT_BYTES;
    type Acc = __m256;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn block<const N: usize>(
        panel: *const u8,
        acts: &[*const u8; N],
        acc: &mut [__m256; N],
    ) {
        let mut w = [_mm256_setzero_si256(); CHUNKS];
        for (c, chunk) in w.iter_mut().enumerate() {
            *chunk = _mm256_loadu_si256(panel.add(c * CHUNK).cast());
        }
        let magnitudes = w.map(|v| _mm256_sign_epi8(v, v));
        let ones = _mm256_set1_epi16(1);
        let d_w = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(Layout::<F>::SCALES).cast()));
        // Indexed so that the loops unroll and the sums stay in registers.
        for j in 0..N {
            let y = acts[j];
            let mut s = if matches!(F::FORM, Form::ShiftedActs) {
                _mm256_loadu_si256(panel.add(Layout::<F>::CORRECTIONS).cast())
            } else {
                _mm256_setzero_si256()
            };
            for (c, &w) in w.iter().enumerate().filter(|_| VNNI) {
                let a = bytes4(y.add(4 * c));
                s = match F::FORM {
                    Form::ShiftedActs => _mm256_dpbusd_avx_epi32(s, a, w),
                    Form::SignedActs => {
                        _mm256_dpbusd_avx_epi32(s, magnitudes[c], _mm256_sign_epi8(a, w))
                    }
                    Form::Offset => _mm256_dpbusd_avx_epi32(s, w, a),
                };
            }
            for first in (0..CHUNKS).step_by(F::CHUNKS_PER_SUM).filter(|_| !VNNI) {
                let mut pairs = _mm256_setzero_si256();
                for c in first..first + F::CHUNKS_PER_SUM {
                    let a = bytes4(y.add(4 * c));
                    let p = match F::FORM {
                        Form::ShiftedActs => _mm256_maddubs_epi16(a, w[c]),
                        Form::SignedActs => {
                            _mm256_maddubs_epi16(magnitudes[c], _mm256_sign_epi8(a, w[c]))
                        }
                        Form::Offset => _mm256_maddubs_epi16(w[c], a),
                    };
                    pairs = _mm256_add_epi16(pairs, p);
                }
                s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs, ones));
            }
            let d_a = _mm256_set1_ps(f32_at(y.add(Layout::<F>::ACT_SCALE)));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d_w, d_a), acc[j]);
            if matches!(F::FORM, Form::Offset) {
                let m_w = _mm256_cvtph_ps(_mm_loadu_si128(panel.add(Layout::<F>::MINS).cast()));
                let s_a = _mm256_set1_ps(f32_at(y.add(Layout::<F>::ACT_S)));
                acc[j] = _mm256_fmadd_ps(m_w, s_a, acc[j]);
            }
        }
    }

    #[inline(always)]
    unsafe fn store(sums: __m256, out: &mut [f32]) {
        _mm256_storeu_ps(out[..ROWS].as_mut_ptr(), sums);
    }
}
