//! The i-quants: super-blocks of 256 values (blocks of 32 for IQ4_NL) whose groups of 4 or 8
//! values are indices into fixed grids of "nice" magnitudes (`iq_tables`), with separate sign
//! bits, or (IQ4_NL, IQ4_XS) indices into 16 non-linear levels. Layouts as ggml's
//! `block_iq*`, fields little-endian:
//!
//! | type    | bytes | layout                                                          |
//! |---------|-------|-----------------------------------------------------------------|
//! | IQ2_XXS | 66    | d, qs[32 × u16]: per 32 values, 4 grid bytes + u32 (4 × 7 sign bits, 4-bit scale) |
//! | IQ2_XS  | 74    | d, qs[32 × u16] (9-bit grid index, 7 sign bits), scales[8] (2 × 4 bits) |
//! | IQ2_S   | 82    | d, qs[32] (grid low bits), signs[32], qh[8] (grid high bits), scales[8] |
//! | IQ3_XXS | 98    | d, qs[64] (grid index), per 32 values a u32 (4 × 7 sign bits, 4-bit scale) |
//! | IQ3_S   | 110   | d, qs[64] (grid low bits), qh[8] (grid bit 8), signs[32], scales[4] |
//! | IQ1_S   | 50    | d, qs[32] (grid low bits), qh[8 × u16] (grid high bits, scale, delta sign) |
//! | IQ1_M   | 56    | qs[32], qh[16] (grid high bits, delta signs), scales[8] (3-bit scales; d in the top nibbles) |
//! | IQ4_NL  | 18    | d, qs[16] (byte j: element j low nibble, j + 16 high nibble)    |
//! | IQ4_XS  | 136   | d, scales_h (u16), scales_l[4], qs[128]                         |
//!
//! In every type, sign bit j of a group of 8 negates element j.

use crate::fp::{f16_to_f32, read_f16};
use crate::iq_tables::*;
use plumb_gguf::QK_K;

const IQ2_XXS_BYTES: usize = 66;
const IQ2_XS_BYTES: usize = 74;
const IQ2_S_BYTES: usize = 82;
const IQ3_XXS_BYTES: usize = 98;
const IQ3_S_BYTES: usize = 110;
const IQ1_S_BYTES: usize = 50;
const IQ1_M_BYTES: usize = 56;
const IQ4_NL_BYTES: usize = 18;
const IQ4_XS_BYTES: usize = 136;

fn u16_at(b: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([b[offset], b[offset + 1]])
}

fn u32_at(b: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes([b[offset], b[offset + 1], b[offset + 2], b[offset + 3]])
}

/// Byte k of a grid entry: element k of its group.
fn grid_byte(entry: u64, k: usize) -> u8 {
    (entry >> (8 * k)) as u8
}

fn sign(signs: u8, j: usize) -> f32 {
    if signs & KMASK_IQ2XS[j] != 0 {
        -1.0
    } else {
        1.0
    }
}

/// Writes 8 values `scale · grid[k] · ±1` (ggml multiplies in that order).
fn write_signed_group(y: &mut [f32], scale: f32, entry: u64, signs: u8) {
    for (j, v) in y[..8].iter_mut().enumerate() {
        *v = scale * f32::from(grid_byte(entry, j)) * sign(signs, j);
    }
}

/// The block scale of the IQ2 types: d·(0.5 + s)·0.25 for a 4-bit s.
fn iq2_scale(d: f32, s: u32) -> f32 {
    d * (0.5 + s as f32) * 0.25
}

/// Per 32 values: 4 grid indices (bytes), then a u32 with four 7-bit sign fields and the
/// block scale in its top 4 bits.
pub(crate) fn dequantize_iq2_xxs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ2_XXS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        for (q, y) in b[2..].chunks_exact(8).zip(y.chunks_exact_mut(32)) {
            let aux = u32_at(q, 4);
            let db = iq2_scale(d, aux >> 28);
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let entry = IQ2XXS_GRID[usize::from(q[l])];
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                write_signed_group(y, db, entry, signs);
            }
        }
    }
}

/// Each u16: a 9-bit grid index and 7 sign bits. Scale byte ib32 holds the scales of its
/// two halves of 16 in its low and high nibble.
pub(crate) fn dequantize_iq2_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ2_XS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        let scales = &b[66..74];
        for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
            let db = [
                iq2_scale(d, u32::from(scales[ib32] & 0xf)),
                iq2_scale(d, u32::from(scales[ib32] >> 4)),
            ];
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let q = u16_at(b, 2 + 2 * (4 * ib32 + l));
                let entry = IQ2XS_GRID[usize::from(q & 511)];
                let signs = KSIGNS_IQ2XS[usize::from(q >> 9)];
                write_signed_group(y, db[l / 2], entry, signs);
            }
        }
    }
}

/// Group l of block ib32: grid index qs[4·ib32 + l] plus bits 2l..2l+1 of qh[ib32] as bits
/// 8–9; its 8 signs are the whole byte signs[4·ib32 + l].
pub(crate) fn dequantize_iq2_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ2_S_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        let qs = &b[2..34];
        let signs = &b[34..66];
        let qh = &b[66..74];
        let scales = &b[74..82];
        for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
            let db = [
                iq2_scale(d, u32::from(scales[ib32] & 0xf)),
                iq2_scale(d, u32::from(scales[ib32] >> 4)),
            ];
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let high = (usize::from(qh[ib32]) << (8 - 2 * l)) & 0x300;
                let entry = IQ2S_GRID[usize::from(qs[4 * ib32 + l]) | high];
                write_signed_group(y, db[l / 2], entry, signs[4 * ib32 + l]);
            }
        }
    }
}

/// Per 32 values: 8 grid indices (bytes, each a group of 4) in qs, and a u32 after all of qs
/// with four 7-bit sign fields (each for 8 values) and the scale d·(0.5 + s)·0.5 on top.
pub(crate) fn dequantize_iq3_xxs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ3_XXS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        let qs = &b[2..66];
        for (ib32, y) in y.chunks_exact_mut(32).enumerate() {
            let aux = u32_at(b, 66 + 4 * ib32);
            let db = d * (0.5 + (aux >> 28) as f32) * 0.5;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let signs = KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize];
                let g1 = IQ3XXS_GRID[usize::from(qs[8 * ib32 + 2 * l])];
                let g2 = IQ3XXS_GRID[usize::from(qs[8 * ib32 + 2 * l + 1])];
                write_signed_group(y, db, u64::from(g1) | (u64::from(g2) << 32), signs);
            }
        }
    }
}

/// Block k of 32: grid indices qs[8k..8k+8], each with a ninth bit from qh[k] (bit 2l for
/// the first index of group l, 2l+1 for the second), signs[4k..4k+4], and scale
/// d·(1 + 2s) with s the low (even k) or high (odd k) nibble of scales[k/2].
pub(crate) fn dequantize_iq3_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ3_S_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        let qs = &b[2..66];
        let qh = &b[66..74];
        let signs = &b[74..106];
        let scales = &b[106..110];
        for (k, y) in y.chunks_exact_mut(32).enumerate() {
            let s = if k % 2 == 0 {
                scales[k / 2] & 0xf
            } else {
                scales[k / 2] >> 4
            };
            let db = d * (1 + 2 * i32::from(s)) as f32;
            let h = usize::from(qh[k]);
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let i1 = usize::from(qs[8 * k + 2 * l]) | ((h << (8 - 2 * l)) & 256);
                let i2 = usize::from(qs[8 * k + 2 * l + 1]) | ((h << (7 - 2 * l)) & 256);
                let entry = u64::from(IQ3S_GRID[i1]) | (u64::from(IQ3S_GRID[i2]) << 32);
                write_signed_group(y, db, entry, signs[4 * k + l]);
            }
        }
    }
}

/// Writes 8 values `scale · (grid[k] + delta)` from an IQ1 grid entry of i8 values.
fn write_iq1_group(y: &mut [f32], scale: f32, entry: u64, delta: f32) {
    for (j, v) in y[..8].iter_mut().enumerate() {
        *v = scale * (f32::from(grid_byte(entry, j) as i8) + delta);
    }
}

/// Block ib of 32: u16 qh[ib] holds 4 × 3 high grid-index bits (bits 3l..), a 3-bit scale
/// s (bits 12–14: dl = d·(2s + 1)) and the delta's sign (bit 15).
pub(crate) fn dequantize_iq1_s(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ1_S_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        let qs = &b[2..34];
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let qh = u16_at(b, 34 + 2 * ib);
            let dl = d * (2 * i32::from((qh >> 12) & 7) + 1) as f32;
            let delta = if qh & 0x8000 != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            };
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let index = usize::from(qs[4 * ib + l]) | (usize::from((qh >> (3 * l)) & 7) << 8);
                write_iq1_group(y, dl, IQ1S_GRID[index], delta);
            }
        }
    }
}

/// The f16 super-block scale of IQ1_M sits in the top nibbles of its four u16 scale words;
/// the other 12 bits of each word are four 3-bit block scales (two per block of 32: one per
/// half of 16). Group l of block ib: grid index qs[4·ib + l] with 3 high bits from the low
/// (even l) or high nibble of qh[2·ib + l/2], whose bit 3 is the delta's sign.
pub(crate) fn dequantize_iq1_m(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ1_M_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let qs = &b[0..32];
        let qh = &b[32..48];
        let sc: [u16; 4] = std::array::from_fn(|k| u16_at(b, 48 + 2 * k));
        let d = f16_to_f32(
            (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000),
        );
        for (ib, y) in y.chunks_exact_mut(32).enumerate() {
            let word = sc[ib / 2];
            let shift = 6 * (ib % 2);
            let dl1 = d * (2 * i32::from((word >> shift) & 7) + 1) as f32;
            let dl2 = d * (2 * i32::from((word >> (shift + 3)) & 7) + 1) as f32;
            for (l, y) in y.chunks_exact_mut(8).enumerate() {
                let h = qh[2 * ib + l / 2] >> (4 * (l % 2));
                let index = usize::from(qs[4 * ib + l]) | (usize::from(h & 7) << 8);
                let delta = if h & 0x08 != 0 {
                    -IQ1S_DELTA
                } else {
                    IQ1S_DELTA
                };
                write_iq1_group(y, if l < 2 { dl1 } else { dl2 }, IQ1S_GRID[index], delta);
            }
        }
    }
}

pub(crate) fn dequantize_iq4_nl(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(IQ4_NL_BYTES).zip(dst.chunks_exact_mut(32)) {
        let d = read_f16(b, 0);
        for (j, &q) in b[2..18].iter().enumerate() {
            y[j] = d * f32::from(KVALUES_IQ4NL[usize::from(q & 0xf)]);
            y[j + 16] = d * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
        }
    }
}

/// Block ib of 32 has a 6-bit scale (biased by 32): low 4 bits in nibble ib%2 of
/// scales_l[ib/2], top 2 bits at bits 2ib.. of scales_h; its 16 qs bytes are laid out as IQ4_NL.
pub(crate) fn dequantize_iq4_xs(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(IQ4_XS_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 0);
        let scales_h = u16_at(b, 2);
        let scales_l = &b[4..8];
        for (ib, (qs, y)) in b[8..136]
            .chunks_exact(16)
            .zip(y.chunks_exact_mut(32))
            .enumerate()
        {
            let low = (scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = d * (i32::from(low | (high << 4)) - 32) as f32;
            for (j, &q) in qs.iter().enumerate() {
                y[j] = dl * f32::from(KVALUES_IQ4NL[usize::from(q & 0xf)]);
                y[j + 16] = dl * f32::from(KVALUES_IQ4NL[usize::from(q >> 4)]);
            }
        }
    }
}
