//! Helpers shared by the AVX2 and AVX-512 kernels: loads from byte slices, f16 scales, and
//! the packed sub-block scale decoders of `layout` done in vector registers (building them
//! from scalar stores would stall on store forwarding once per super-block).
//!
//! Each helper needs at most AVX2, FMA and F16C, which both instruction sets include, and is
//! `#[inline(always)]` so that it compiles into the calling kernel's `#[target_feature]`
//! function. Loads go through bounds-checked sub-slices.

use std::arch::x86_64::*;

#[inline(always)]
pub(super) unsafe fn load128(b: &[u8], at: usize) -> __m128i {
    _mm_loadu_si128(b[at..at + 16].as_ptr().cast())
}

#[inline(always)]
pub(super) unsafe fn load256(b: &[u8], at: usize) -> __m256i {
    _mm256_loadu_si256(b[at..at + 32].as_ptr().cast())
}

#[inline(always)]
pub(super) unsafe fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline(always)]
pub(super) unsafe fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The f16 at `b[at..at + 2]`, converted with F16C.
#[inline(always)]
pub(super) unsafe fn f16_at(b: &[u8], at: usize) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16_at(b, at)))))
}

/// `layout::k4_scales_mins` on the 12 bytes at `b[at..]`: 8 scales, then 8 mins, as bytes.
#[inline(always)]
pub(super) unsafe fn k4_scales_mins_vec(b: &[u8], at: usize) -> __m128i {
    let (x0, x1, x2) = (u32_at(b, at), u32_at(b, at + 4), u32_at(b, at + 8));
    let x = _mm_setr_epi32(x0 as i32, x1 as i32, x2 as i32, 0);
    // Words [a, c, b, c >> 4] masked to the 6-bit (a, b) and 4-bit (c) parts ...
    let low = _mm_srlv_epi32(
        _mm_shuffle_epi32::<0b10_01_10_00>(x),
        _mm_setr_epi32(0, 0, 0, 4),
    );
    let low = _mm_and_si128(
        low,
        _mm_setr_epi32(0x3f3f_3f3f, 0x0f0f_0f0f, 0x3f3f_3f3f, 0x0f0f_0f0f),
    );
    // ... and the top 2 bits of a and b, which complete the scales and mins of 4..8.
    let top = _mm_srli_epi32::<6>(_mm_shuffle_epi32::<0b01_01_00_00>(x));
    let top = _mm_and_si128(top, _mm_setr_epi32(0, 0x0303_0303, 0, 0x0303_0303));
    _mm_or_si128(low, _mm_slli_epi32::<4>(top))
}

/// `layout::q3_k_scales` on the 12 bytes at `b[at..]`: 16 six-bit values, biased by 32.
#[inline(always)]
pub(super) unsafe fn q3_k_scales_vec(b: &[u8], at: usize) -> __m128i {
    let (a, bb, c) = (u32_at(b, at), u32_at(b, at + 4), u32_at(b, at + 8));
    let low = _mm_srlv_epi32(
        _mm_setr_epi32(a as i32, bb as i32, a as i32, bb as i32),
        _mm_setr_epi32(0, 0, 4, 4),
    );
    let low = _mm_and_si128(low, _mm_set1_epi32(0x0f0f_0f0f));
    let top = _mm_srlv_epi32(_mm_set1_epi32(c as i32), _mm_setr_epi32(0, 2, 4, 6));
    let top = _mm_and_si128(top, _mm_set1_epi32(0x0303_0303));
    _mm_or_si128(low, _mm_slli_epi32::<4>(top))
}

/// `layout::iq4_xs_scales` of an IQ4_XS block, minus the bias 32: 8 i32 lanes.
#[inline(always)]
pub(super) unsafe fn iq4_xs_scales_vec(b: &[u8]) -> __m256i {
    use super::layout::iq4_xs;
    let low = _mm256_srlv_epi32(
        _mm256_set1_epi32(u32_at(b, iq4_xs::SCALES_L) as i32),
        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
    );
    let high = _mm256_srlv_epi32(
        _mm256_set1_epi32(i32::from(u16_at(b, iq4_xs::SCALES_H))),
        _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
    );
    let scales = _mm256_or_si256(
        _mm256_and_si256(low, _mm256_set1_epi32(0xf)),
        _mm256_slli_epi32::<4>(_mm256_and_si256(high, _mm256_set1_epi32(3))),
    );
    _mm256_sub_epi32(scales, _mm256_set1_epi32(32))
}

/// Each i32 lane `v` (a 16-bit value) as the pair `(v, v)` of i16, the form `madd_epi16`
/// multiplies adjacent 16-bit products by.
#[inline(always)]
pub(super) unsafe fn i16_pairs256(v: __m256i) -> __m256i {
    _mm256_or_si256(
        _mm256_and_si256(v, _mm256_set1_epi32(0xffff)),
        _mm256_slli_epi32::<16>(v),
    )
}

#[inline(always)]
pub(super) unsafe fn hsum_ps256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}
