//! Where each field of the weight super-blocks lies (ggml's `block_q2_K` .. `block_q6_K` and
//! `block_iq4_xs`, see `crate::k_quants` and `crate::iq` for the element order), and the
//! decoders of their packed sub-block scales, shared by every instruction set's kernels.
//!
//! The scale decoders work on whole little-endian words, as ggml's kernels do, because they
//! run once per super-block per weight row: bit-by-bit decoding would cost as much as the
//! integer dot product itself on the wider instruction sets.

pub(super) const Q2_K_BYTES: usize = 84;
pub(super) const Q3_K_BYTES: usize = 110;
pub(super) const Q4_K_BYTES: usize = 144;
pub(super) const Q5_K_BYTES: usize = 176;
pub(super) const Q6_K_BYTES: usize = 210;
pub(super) const IQ4_XS_BYTES: usize = 136;

/// Q2_K: `scales[16]` (low nibble scale, high nibble min), `qs[64]`, f16 `d`, f16 `dmin`.
pub(super) mod q2_k {
    pub const SCALES: usize = 0;
    pub const QS: usize = 16;
    pub const D: usize = 80;
    pub const DMIN: usize = 82;
}

/// Q3_K: `hmask[32]`, `qs[64]`, `scales[12]` (16 six-bit scales biased by 32), f16 `d`.
pub(super) mod q3_k {
    pub const HMASK: usize = 0;
    pub const QS: usize = 32;
    pub const SCALES: usize = 96;
    pub const D: usize = 108;
}

/// Q4_K: f16 `d`, f16 `dmin`, `scales[12]` (8 six-bit scales and mins), `qs[128]`.
/// Q5_K is the same with `qh[32]` between `scales` and `qs`.
pub(super) mod q4_k {
    pub const D: usize = 0;
    pub const SCALES: usize = 4;
    pub const QS: usize = 16;
}

/// Q5_K: as Q4_K, with the fifth bits in `qh[32]`.
pub(super) mod q5_k {
    pub const QH: usize = 16;
    pub const QS: usize = 48;
}

/// Q6_K: `ql[128]`, `qh[64]`, `scales[16]` (i8), f16 `d`.
pub(super) mod q6_k {
    pub const QL: usize = 0;
    pub const QH: usize = 128;
    pub const SCALES: usize = 192;
    pub const D: usize = 208;
}

/// IQ4_XS: f16 `d`, u16 `scales_h`, `scales_l[4]`, `qs[128]`.
pub(super) mod iq4_xs {
    pub const D: usize = 0;
    pub const SCALES_H: usize = 2;
    pub const SCALES_L: usize = 4;
    pub const QS: usize = 8;
}

fn word(bytes: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([
        bytes[4 * i],
        bytes[4 * i + 1],
        bytes[4 * i + 2],
        bytes[4 * i + 3],
    ])
}

fn bytes_of(words: [u32; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (chunk, w) in out.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The 12 packed scale bytes of Q4_K and Q5_K as 8 six-bit scales (bytes 0..8) followed by
/// 8 six-bit mins (bytes 8..16). Sub-blocks 0–3 keep 6 bits in bytes 0–3 (scales) and 4–7
/// (mins); sub-blocks 4–7 keep their low 4 bits in the nibbles of bytes 8–11 and their top
/// 2 bits in the top bits of bytes 0–7.
pub(super) fn k4_scales_mins(packed: &[u8]) -> [u8; 16] {
    let (a, b, c) = (word(packed, 0), word(packed, 1), word(packed, 2));
    bytes_of([
        a & 0x3f3f_3f3f,
        (c & 0x0f0f_0f0f) | (((a >> 6) & 0x0303_0303) << 4),
        b & 0x3f3f_3f3f,
        ((c >> 4) & 0x0f0f_0f0f) | (((b >> 6) & 0x0303_0303) << 4),
    ])
}

/// The 12 packed scale bytes of Q3_K as 16 six-bit values, still biased by 32. Scale j has
/// its low 4 bits in nibble j/8 of byte j%8 and its top 2 bits at bits 2(j/4).. of byte
/// 8 + j%4.
pub(super) fn q3_k_scales(packed: &[u8]) -> [u8; 16] {
    let (a, b, c) = (word(packed, 0), word(packed, 1), word(packed, 2));
    let low = 0x0f0f_0f0f;
    let top = 0x0303_0303;
    bytes_of([
        (a & low) | ((c & top) << 4),
        (b & low) | (((c >> 2) & top) << 4),
        ((a >> 4) & low) | (((c >> 4) & top) << 4),
        ((b >> 4) & low) | (((c >> 6) & top) << 4),
    ])
}

/// The 8 six-bit scales of an IQ4_XS block, biased by 32: sub-block j has its low 4 bits in
/// nibble j%2 of `scales_l[j/2]` and its top 2 bits at bits 2j.. of `scales_h`.
pub(super) fn iq4_xs_scales(block: &[u8]) -> [u8; 8] {
    let high = u16::from_le_bytes([block[iq4_xs::SCALES_H], block[iq4_xs::SCALES_H + 1]]);
    let low = &block[iq4_xs::SCALES_L..iq4_xs::SCALES_L + 4];
    std::array::from_fn(|j| {
        ((low[j / 2] >> (4 * (j % 2))) & 0xf) | ((((high >> (2 * j)) & 3) as u8) << 4)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k4_scales_match_the_bitwise_definition() {
        let packed: [u8; 12] = std::array::from_fn(|i| (i as u8).wrapping_mul(97).wrapping_add(13));
        let got = k4_scales_mins(&packed);
        for j in 0..8 {
            let (sc, m) = if j < 4 {
                (packed[j] & 63, packed[j + 4] & 63)
            } else {
                (
                    (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4),
                    (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4),
                )
            };
            assert_eq!((got[j], got[8 + j]), (sc, m), "sub-block {j}");
        }
    }

    #[test]
    fn q3_k_scales_match_the_bitwise_definition() {
        let packed: [u8; 12] = std::array::from_fn(|i| (i as u8).wrapping_mul(181).wrapping_add(7));
        let got = q3_k_scales(&packed);
        for (j, &g) in got.iter().enumerate() {
            let low = if j < 8 {
                packed[j] & 0xF
            } else {
                packed[j - 8] >> 4
            };
            let high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
            assert_eq!(g, low | (high << 4), "sub-block {j}");
        }
    }
}
