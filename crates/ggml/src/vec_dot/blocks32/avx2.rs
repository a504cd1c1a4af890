//! AVX2 kernels ([`Isa::Avx2`]: AVX2, FMA and F16C): one 32-element block per 256-bit
//! register.
//!
//! Integer types: each weight block is unpacked once to 32 bytes and used for up to four
//! activation rows. `vpmaddubsw` multiplies unsigned by signed bytes, so signed weights are
//! used as magnitudes and their signs moved onto the activations with `vpsignb` (as ggml
//! does; the activations lie in −127..=127, so negating them never overflows, and the pair
//! sums stay below i16::MAX). `vpmaddwd` finishes the sums in i32 lanes, which are converted
//! once per block and scaled by d_w·d_a with an FMA into per-row f32 accumulators.
//!
//! Float types: each row's products are summed by FMA into four accumulators of 8 f32 lanes,
//! the weights converted to f32 once for two rows.

use std::arch::x86_64::*;

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES,
};
use super::rows::{block_count, dot_many, RowKernel};
use super::{quantize, x86_quantize};
use crate::iq_tables::KVALUES_IQ4NL;
use crate::vec_dot::{KernelFns, QuantizeFn};
use crate::GgmlType;

/// Rows of `dot_many` computed together with one unpacked weight block: four accumulators
/// and their temporaries fit in the 16 registers.
const ROWS: usize = 4;
/// Rows per float weight conversion: two rows of four accumulators.
const FLOAT_ROWS: usize = 2;

pub(super) fn kernel(weight_type: GgmlType) -> Option<KernelFns> {
    use GgmlType as T;
    let q8_0: (GgmlType, QuantizeFn) = (T::Q8_0, x86_quantize::q8_0);
    let q8_1: (GgmlType, QuantizeFn) = (T::Q8_1, x86_quantize::q8_1);
    Some(match weight_type {
        T::Q4_0 => fns::<Signed<Q4_0>, ROWS>(q8_0),
        T::Q5_0 => fns::<Signed<Q5_0>, ROWS>(q8_0),
        T::Q8_0 => fns::<Signed<Q8_0>, ROWS>(q8_0),
        T::IQ4_NL => fns::<Signed<Iq4Nl>, ROWS>(q8_0),
        T::Q4_1 => fns::<Offset<Q4_1>, ROWS>(q8_1),
        T::Q5_1 => fns::<Offset<Q5_1>, ROWS>(q8_1),
        T::F16 => fns::<Float<F16Lanes>, FLOAT_ROWS>((T::F16, x86_quantize::f16)),
        T::BF16 => fns::<Float<Bf16Lanes>, FLOAT_ROWS>((T::BF16, x86_quantize::bf16)),
        T::F32 => fns::<Float<F32Lanes>, FLOAT_ROWS>((T::F32, quantize::f32)),
        _ => return None,
    })
}

fn fns<K: RowKernel, const G: usize>((act_type, quantize): (GgmlType, QuantizeFn)) -> KernelFns {
    // SAFETY (both closures): `kernel` is only reached through `DotKernel` for Isa::Avx2 (or
    // higher x86 instruction sets), which it hands out only after `Isa::available()`
    // confirmed at run time that this CPU has AVX2, FMA and F16C.
    KernelFns {
        act_type,
        quantize,
        dot: |w, act| unsafe { dot_avx2::<K>(w, act) },
        dot_many: |w, acts, out| unsafe { dot_many_avx2::<K, G>(w, acts, out) },
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2<K: RowKernel>(w: &[u8], act: &[u8]) -> f32 {
    K::rows::<1>(w, [act])[0]
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_many_avx2<K: RowKernel, const G: usize>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    dot_many::<K, G>(w, acts, out)
}

/// The 16-byte nibble array at `p` as 32 bytes: low nibbles, then high nibbles.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let x = _mm_loadu_si128(p.cast());
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(x), x);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// The 32 bits of the little-endian u32 at `p` as bytes: 0xFF where the bit is set, else 0.
#[inline(always)]
unsafe fn bits(p: *const u8) -> __m256i {
    let x = u32::from_le(p.cast::<u32>().read_unaligned());
    // Byte j gets byte j/8 of x; setting every bit but bit j%8 leaves 0xFF iff it was set.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(x as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi8(-1))
}

/// The half at `p`, as f32 in every lane. (Converting into one lane only lets the compiler
/// merge the half into a stale register, which chained each block's scale to the previous
/// block's accumulator.)
#[inline(always)]
unsafe fn f16_splat(p: *const u8) -> __m256 {
    let h = u16::from_le(p.cast::<u16>().read_unaligned());
    _mm256_cvtph_ps(_mm_set1_epi16(h as i16))
}

/// The two halves at `p`, as f32 in lanes 0 and 1.
#[inline(always)]
unsafe fn f16_pair(p: *const u8) -> __m128 {
    let x = u32::from_le(p.cast::<u32>().read_unaligned());
    _mm_cvtph_ps(_mm_cvtsi32_si128(x as i32))
}

#[inline(always)]
unsafe fn hsum(x: __m256) -> f32 {
    let x = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps::<1>(x));
    let x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)))
}

/// Sums of four adjacent products of unsigned `u` and signed `s` bytes, as f32 lanes.
#[inline(always)]
unsafe fn byte_dot(u: __m256i, s: __m256i) -> __m256 {
    let pairs = _mm256_maddubs_epi16(u, s);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// A signed weight format, read one block at a time.
trait SignedBlock: SignedBlocks {
    /// The 32 signed values of the block at `p`.
    unsafe fn values(p: *const u8) -> __m256i;
}

impl SignedBlock for Q4_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m256i {
        _mm256_sub_epi8(nibbles(p.add(2)), _mm256_set1_epi8(8))
    }
}

impl SignedBlock for Q5_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m256i {
        // (q | fifth bit << 4) − 16 is q where the bit is set, q | 0xF0 (q − 16) where not.
        let clear = _mm256_andnot_si256(bits(p.add(2)), _mm256_set1_epi8(0xF0u8 as i8));
        _mm256_or_si256(nibbles(p.add(6)), clear)
    }
}

impl SignedBlock for Q8_0 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p.add(2).cast())
    }
}

impl SignedBlock for Iq4Nl {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m256i {
        let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(KVALUES_IQ4NL.as_ptr().cast()));
        _mm256_shuffle_epi8(levels, nibbles(p.add(2)))
    }
}

/// Signed weights against Q8_0 activations.
struct Signed<W>(W);

impl<W: SignedBlock> RowKernel for Signed<W> {
    const W_BYTES: usize = W::BYTES;
    const A_BYTES: usize = Q8_0_BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let nb = block_count(w, W::BYTES, &acts, Q8_0_BYTES);
        let mut acc = [_mm256_setzero_ps(); R];
        for i in 0..nb {
            // SAFETY (all reads): block i < nb lies within `w` and every row.
            let wp = w.as_ptr().add(i * W::BYTES);
            let v = W::values(wp);
            let magnitude = _mm256_sign_epi8(v, v);
            let d = f16_splat(wp);
            // Indexed so that the loop unrolls and the accumulators stay in registers.
            for r in 0..R {
                let a = acts[r].as_ptr().add(i * Q8_0_BYTES);
                let y = _mm256_sign_epi8(_mm256_loadu_si256(a.add(2).cast()), v);
                let scale = _mm256_mul_ps(d, f16_splat(a));
                acc[r] = _mm256_fmadd_ps(byte_dot(magnitude, y), scale, acc[r]);
            }
        }
        let mut out = [0.0; R];
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
        out
    }
}

/// An offset weight format, read one block at a time.
trait OffsetBlock: OffsetBlocks {
    /// The 32 unsigned values of the block at `p`.
    unsafe fn values(p: *const u8) -> __m256i;
}

impl OffsetBlock for Q4_1 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m256i {
        nibbles(p.add(4))
    }
}

impl OffsetBlock for Q5_1 {
    #[inline(always)]
    unsafe fn values(p: *const u8) -> __m256i {
        let fifth = _mm256_and_si256(bits(p.add(4)), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(p.add(8)), fifth)
    }
}

/// Offset weights against Q8_1 activations: d_w·d_a·Σq·y per block, plus m·s, whose sum is
/// kept apart in lane 1 of a 4-lane accumulator.
struct Offset<W>(W);

impl<W: OffsetBlock> RowKernel for Offset<W> {
    const W_BYTES: usize = W::BYTES;
    const A_BYTES: usize = Q8_1_BYTES;

    #[inline(always)]
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
        let nb = block_count(w, W::BYTES, &acts, Q8_1_BYTES);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut offsets = [_mm_setzero_ps(); R];
        for i in 0..nb {
            // SAFETY (all reads): block i < nb lies within `w` and every row.
            let wp = w.as_ptr().add(i * W::BYTES);
            let q = W::values(wp);
            // [d, m]
            let dm = f16_pair(wp);
            for r in 0..R {
                let a = acts[r].as_ptr().add(i * Q8_1_BYTES);
                let y = _mm256_loadu_si256(a.add(4).cast());
                // [d·d_a, m·s]
                let products = _mm_mul_ps(dm, f16_pair(a));
                let scale = _mm256_broadcastss_ps(products);
                acc[r] = _mm256_fmadd_ps(byte_dot(q, y), scale, acc[r]);
                offsets[r] = _mm_add_ps(offsets[r], products);
            }
        }
        let mut out = [0.0; R];
        for r in 0..R {
            let offset = _mm_cvtss_f32(_mm_movehdup_ps(offsets[r]));
            out[r] = hsum(acc[r]) + offset;
        }
        out
    }
}

/// A float format, read 8 elements at a time as f32 lanes.
trait FloatLanes {
    const BYTES: usize;
    unsafe fn load(p: *const u8) -> __m256;
}

struct F16Lanes;
struct Bf16Lanes;
struct F32Lanes;

impl FloatLanes for F16Lanes {
    const BYTES: usize = 2;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
}

impl FloatLanes for Bf16Lanes {
    const BYTES: usize = 2;
    /// bf16 is the high half of an f32.
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256 {
        let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
    }
}

impl FloatLanes for F32Lanes {
    const BYTES: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const u8) -> __m256 {
        _mm256_loadu_ps(p.cast())
    }
}

/// Float weights against activations of the same type.
struct Float<F>(F);

/// The first `n` < 8 elements at `p`, zero-padded to 8 in a copy that a full load may read.
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
        let mut acc = [[_mm256_setzero_ps(); 4]; R];
        let mut i = 0;
        // SAFETY (all loads): elements i..i + 32 (or i + 8) lie within `w` and every row,
        // which hold n elements.
        while i + 32 <= n {
            let wv = [
                F::load(at(w, i)),
                F::load(at(w, i + 8)),
                F::load(at(w, i + 16)),
                F::load(at(w, i + 24)),
            ];
            for r in 0..R {
                for j in 0..4 {
                    let a = F::load(at(acts[r], i + 8 * j));
                    acc[r][j] = _mm256_fmadd_ps(wv[j], a, acc[r][j]);
                }
            }
            i += 32;
        }
        while i + 8 <= n {
            let wv = F::load(at(w, i));
            for r in 0..R {
                acc[r][0] = _mm256_fmadd_ps(wv, F::load(at(acts[r], i)), acc[r][0]);
            }
            i += 8;
        }
        if i < n {
            let wv = F::load(padded::<F>(w, i, n - i).as_ptr());
            for r in 0..R {
                let a = F::load(padded::<F>(acts[r], i, n - i).as_ptr());
                acc[r][0] = _mm256_fmadd_ps(wv, a, acc[r][0]);
            }
        }
        let mut out = [0.0; R];
        for r in 0..R {
            let [a, b, c, d] = acc[r];
            out[r] = hsum(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
        }
        out
    }
}
