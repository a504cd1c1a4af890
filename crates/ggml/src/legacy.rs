//! The legacy quants: blocks of 32 values with one f16 scale `d` (and, for the `_1` types, an
//! f16 offset `m`). Layouts as ggml's `block_q4_0` ... `block_q8_1`, all fields little-endian:
//!
//! | type | bytes | layout                                   | value                 |
//! |------|-------|------------------------------------------|-----------------------|
//! | Q4_0 | 18    | d, qs[16] (4-bit)                        | d·(q − 8)             |
//! | Q4_1 | 20    | d, m, qs[16] (4-bit)                     | d·q + m               |
//! | Q5_0 | 22    | d, qh[4] (5th bits), qs[16]              | d·(q − 16)            |
//! | Q5_1 | 24    | d, m, qh[4], qs[16]                      | d·q + m               |
//! | Q8_0 | 34    | d, qs[32] (i8)                           | d·q                   |
//! | Q8_1 | 36    | d, s = d·Σq, qs[32] (i8)                 | d·q                   |
//!
//! Byte j of `qs` holds element j in its low nibble and element j + 16 in its high nibble.
//! Bit j of the 32-bit `qh` is the fifth bit of element j.

use crate::fp::{read_f16, write_f16};

/// Elements per legacy block.
pub(crate) const QK: usize = 32;

pub(crate) fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(18).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let qs = &b[2..18];
        for j in 0..QK / 2 {
            let x0 = i32::from(qs[j] & 0x0F) - 8;
            let x1 = i32::from(qs[j] >> 4) - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q4_0_ref`: the value of largest magnitude maps to −8 exactly.
pub(crate) fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(18)) {
        let max = signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(b, 0, d);
        for j in 0..QK / 2 {
            // Truncation after +8.5 rounds half up; the cast saturates as the C cast never
            // needs to (the largest input lands on exactly 16).
            let xi0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let xi1 = ((x[j + QK / 2] * id + 8.5) as i8).min(15) as u8;
            b[2 + j] = xi0 | (xi1 << 4);
        }
    }
}

pub(crate) fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(20).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let m = read_f16(b, 2);
        let qs = &b[4..20];
        for j in 0..QK / 2 {
            let x0 = i32::from(qs[j] & 0x0F);
            let x1 = i32::from(qs[j] >> 4);
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }
}

/// ggml's `quantize_row_q4_1_ref`: min and max of the block span the 16 levels.
pub(crate) fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(20)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(b, 0, d);
        write_f16(b, 2, min);
        for j in 0..QK / 2 {
            let xi0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let xi1 = (((x[j + QK / 2] - min) * id + 0.5) as i8).min(15) as u8;
            b[4 + j] = xi0 | (xi1 << 4);
        }
    }
}

pub(crate) fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(22).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..22];
        for j in 0..QK / 2 {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            let x0 = (u32::from(qs[j] & 0x0F) | h0) as i32 - 16;
            let x1 = (u32::from(qs[j] >> 4) | h1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

/// ggml's `quantize_row_q5_0_ref`: as Q4_0 with 32 levels.
pub(crate) fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(22)) {
        let max = signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(b, 0, d);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let xi0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
            let xi1 = ((x[j + QK / 2] * id + 16.5) as i8).min(31) as u8;
            b[6 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= u32::from(xi0 >> 4) << j;
            qh |= u32::from(xi1 >> 4) << (j + QK / 2);
        }
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

pub(crate) fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(24).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        let m = read_f16(b, 2);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..24];
        for j in 0..QK / 2 {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            let x0 = u32::from(qs[j] & 0x0F) | h0;
            let x1 = u32::from(qs[j] >> 4) | h1;
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }
}

/// ggml's `quantize_row_q5_1_ref`: as Q4_1 with 32 levels.
pub(crate) fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(24)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        write_f16(b, 0, d);
        write_f16(b, 2, min);
        let mut qh = 0u32;
        for j in 0..QK / 2 {
            let xi0 = ((x[j] - min) * id + 0.5) as u8;
            let xi1 = ((x[j + QK / 2] - min) * id + 0.5) as u8;
            b[8 + j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= u32::from(xi0 >> 4) << j;
            qh |= u32::from(xi1 >> 4) << (j + QK / 2);
        }
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

pub(crate) fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(34).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        for (v, &q) in y.iter_mut().zip(&b[2..34]) {
            *v = f32::from(q as i8) * d;
        }
    }
}

/// ggml's `quantize_row_q8_0_ref`: d = amax/127, q = round(x/d) (half away from zero).
pub(crate) fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(34)) {
        let (d, id) = q8_scale(x);
        write_f16(b, 0, d);
        for (q, &v) in b[2..34].iter_mut().zip(x) {
            *q = (v * id).round() as i8 as u8;
        }
    }
}

/// Q8_1 as ggml's CPU backend would dequantize it if it had a dequantizer: d·q. The stored
/// sum `s` is redundant and is not read.
pub(crate) fn dequantize_q8_1(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(36).zip(dst.chunks_exact_mut(QK)) {
        let d = read_f16(b, 0);
        for (v, &q) in y.iter_mut().zip(&b[4..36]) {
            *v = f32::from(q as i8) * d;
        }
    }
}

/// ggml's `quantize_row_q8_1_ref`: as Q8_0, plus s = d·Σq (with the unrounded f32 d).
pub(crate) fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK).zip(dst.chunks_exact_mut(36)) {
        let (d, id) = q8_scale(x);
        write_f16(b, 0, d);
        let mut sum = 0i32;
        for (q, &v) in b[4..36].iter_mut().zip(x) {
            let qi = (v * id).round() as i8;
            *q = qi as u8;
            sum += i32::from(qi);
        }
        write_f16(b, 2, sum as f32 * d);
    }
}

/// The scale of the 8-bit types and its inverse (0 for an all-zero block).
fn q8_scale(x: &[f32]) -> (f32, f32) {
    // C's MAX(a, b): a NaN in the block propagates as in ggml.
    let amax = x
        .iter()
        .fold(0.0f32, |a, v| if a > v.abs() { a } else { v.abs() });
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    (d, id)
}

/// The value of largest magnitude, with its sign; the first one on ties.
fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}
