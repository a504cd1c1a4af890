//! The k-quants: super-blocks of 256 values (`QK_K`) split into sub-blocks that each have a
//! small integer scale (and for Q2_K, Q4_K, Q5_K a min), themselves scaled by f16 super-block
//! factors `d` and `dmin`. Layouts as ggml's `block_q2_K` ... `block_q8_K`:
//!
//! | type | bytes | layout                                                  | value           |
//! |------|-------|---------------------------------------------------------|-----------------|
//! | Q2_K | 84    | scales[16] (4-bit scale, 4-bit min), qs[64], d, dmin    | d·s·q − dmin·m  |
//! | Q3_K | 110   | hmask[32], qs[64], scales[12] (16 × 6 bits), d          | d·(s−32)·(q−4)  |
//! | Q4_K | 144   | d, dmin, scales[12] (8 × 6-bit scale and min), qs[128]  | d·s·q − dmin·m  |
//! | Q5_K | 176   | d, dmin, scales[12], qh[32], qs[128]                    | d·s·q − dmin·m  |
//! | Q6_K | 210   | ql[128], qh[64], scales[16] (i8), d                     | d·s·(q−32)      |
//! | Q8_K | 292   | d (f32), qs[256] (i8), bsums[16] (i16, sums of 16 qs)   | d·q             |
//!
//! The element order inside each super-block is ggml's: the comments at each function say
//! which bits of which byte hold element i.

use crate::fp::{read_f16, write_f16};
use crate::scale_search::{
    asymmetric_weighted, nearest_int, symmetric_refined, symmetric_x2_weighted, AsymmetricSearch,
};
use plumb_gguf::QK_K;

const Q2_K_BYTES: usize = 84;
const Q3_K_BYTES: usize = 110;
const Q4_K_BYTES: usize = 144;
const Q5_K_BYTES: usize = 176;
const Q6_K_BYTES: usize = 210;
const Q8_K_BYTES: usize = 292;

/// Scale and min of sub-block `j` (0..8) from the 12 packed bytes of Q4_K and Q5_K
/// (ggml's `get_scale_min_k4`): sub-blocks 0–3 keep 6 bits in bytes 0–3 (scale) and 4–7 (min);
/// sub-blocks 4–7 keep their low 4 bits in bytes 8–11 and their top 2 bits in the top bits
/// of bytes 0–7.
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Packs 6-bit scales and mins of 8 sub-blocks into the 12 bytes `scale_min_k4` reads.
fn pack_scale_min_k4(ls: &[u8; 8], lm: &[u8; 8], q: &mut [u8]) {
    for j in 0..8 {
        if j < 4 {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (ls[j] & 0xF) | ((lm[j] & 0xF) << 4);
            q[j - 4] |= (ls[j] >> 4) << 6;
            q[j] |= (lm[j] >> 4) << 6;
        }
    }
}

/// Packs 2-bit levels as Q2_K and Q3_K store them: within each half of 128 elements, byte l
/// of its 32 holds elements l, l+32, l+64, l+96 in bits 0–1, 2–3, 4–5, 6–7.
fn pack_2bit(levels: &[u8; QK_K], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for l in 0..32 {
            qs[j / 4 + l] = levels[j + l]
                | (levels[j + l + 32] << 2)
                | (levels[j + l + 64] << 4)
                | (levels[j + l + 96] << 6);
        }
    }
}

// ---------------------------------------------------------------------------------------- Q2_K

/// Element `128h + 32s + 16g + l` (h half, s shift pair, g group) is bits 2s..2s+1 of
/// `qs[32h + 16g + l]`; its sub-block is `8h + 2s + g`.
pub(crate) fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q2_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let scales = &b[0..16];
        let d = read_f16(b, 80);
        let min = read_f16(b, 82);
        let mut out = y.iter_mut();
        let mut is = 0;
        for half in 0..2 {
            let q = &b[16 + 32 * half..16 + 32 * half + 32];
            for shift in (0..8).step_by(2) {
                for group in 0..2 {
                    let sc = scales[is];
                    is += 1;
                    let dl = d * f32::from(sc & 0xF);
                    let ml = min * f32::from(sc >> 4);
                    for &byte in &q[16 * group..16 * group + 16] {
                        let level = (byte >> shift) & 3;
                        *out.next().expect("256 outputs") = dl * f32::from(level) - ml;
                    }
                }
            }
        }
    }
}

/// ggml's `quantize_row_q2_K_ref`.
pub(crate) fn quantize_q2_k(src: &[f32], dst: &mut [u8]) {
    const Q4SCALE: f32 = 15.0;
    let search = AsymmetricSearch {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q2_K_BYTES)) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_min = 0.0f32;
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            let weights: [f32; 16] = std::array::from_fn(|l| xs[l].abs());
            (scales[j], mins[j]) =
                asymmetric_weighted(xs, &weights, 3, &search, &mut levels[16 * j..16 * j + 16]);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }

        let (packed_scales, rest) = b.split_at_mut(16);
        if max_scale > 0.0 {
            let iscale = Q4SCALE / max_scale;
            for j in 0..16 {
                packed_scales[j] = nearest_int(iscale * scales[j]) as u8;
            }
            write_f16(rest, 64, max_scale / Q4SCALE);
        } else {
            packed_scales.fill(0);
            write_f16(rest, 64, 0.0);
        }
        if max_min > 0.0 {
            let iscale = Q4SCALE / max_min;
            for j in 0..16 {
                packed_scales[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            write_f16(rest, 66, max_min / Q4SCALE);
        } else {
            write_f16(rest, 66, 0.0);
        }

        // Requantize against the rounded scales.
        let d_all = read_f16(rest, 64);
        let m_all = read_f16(rest, 66);
        for j in 0..16 {
            let d = d_all * f32::from(packed_scales[j] & 0xF);
            if d == 0.0 {
                continue;
            }
            let dm = m_all * f32::from(packed_scales[j] >> 4);
            for ii in 0..16 {
                levels[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / d).clamp(0, 3) as u8;
            }
        }
        pack_2bit(&levels, &mut rest[..64]);
    }
}

// ---------------------------------------------------------------------------------------- Q3_K

/// The 6-bit scale of sub-block `j` (0..16), biased by 32: the low 4 bits are nibble j%8 of
/// bytes 0–7 (low nibbles for j < 8), the top 2 bits are bits 2(j/4).. of byte 8 + j%4.
fn q3_k_scale(scales: &[u8], j: usize) -> i32 {
    let low = if j < 8 {
        scales[j] & 0xF
    } else {
        scales[j - 8] >> 4
    };
    let high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    i32::from(low | (high << 4)) - 32
}

/// Element `128h + 32s + 16g + l` has its low 2 bits at bits 2s.. of `qs[32h + 16g + l]` and
/// its high bit (set means "no −4") at bit 4h+s of `hmask[16g + l]`; sub-block `8h + 2s + g`.
pub(crate) fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q3_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let hmask = &b[0..32];
        let scales = &b[96..108];
        let d_all = read_f16(b, 108);
        let mut out = y.iter_mut();
        let mut is = 0;
        let mut m = 1u8;
        for half in 0..2 {
            let q = &b[32 + 32 * half..32 + 32 * half + 32];
            for shift in (0..8).step_by(2) {
                for group in 0..2 {
                    let dl = d_all * q3_k_scale(scales, is) as f32;
                    is += 1;
                    for l in 16 * group..16 * group + 16 {
                        let low = i32::from((q[l] >> shift) & 3);
                        let minus = if hmask[l] & m != 0 { 0 } else { 4 };
                        *out.next().expect("256 outputs") = dl * (low - minus) as f32;
                    }
                }
                m <<= 1;
            }
        }
    }
}

/// ggml's `quantize_row_q3_K_ref`.
pub(crate) fn quantize_q3_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q3_K_BYTES)) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut max_scale = 0.0f32;
        let mut amax = 0.0f32;
        for j in 0..16 {
            scales[j] =
                symmetric_refined(&x[16 * j..16 * j + 16], 4, &mut levels[16 * j..16 * j + 16]);
            let scale = scales[j].abs();
            if scale > amax {
                amax = scale;
                max_scale = scales[j];
            }
        }

        let (hmask, rest) = b.split_at_mut(32);
        let (qs, rest) = rest.split_at_mut(64);
        let (packed, d_bytes) = rest.split_at_mut(12);
        packed.fill(0);
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for (j, &scale) in scales.iter().enumerate() {
                // ggml stores the rounded value in an int8_t before clamping.
                let l = (i32::from(nearest_int(iscale * scale) as i8).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    packed[j] = l & 0xF;
                } else {
                    packed[j - 8] |= (l & 0xF) << 4;
                }
                packed[j % 4 + 8] |= (l >> 4) << (2 * (j / 4));
            }
            write_f16(d_bytes, 0, 1.0 / iscale);
        } else {
            write_f16(d_bytes, 0, 0.0);
        }

        let d_all = read_f16(d_bytes, 0);
        for j in 0..16 {
            let d = d_all * q3_k_scale(packed, j) as f32;
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                levels[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-4, 3) + 4) as u8;
            }
        }

        // The high bit of element j goes to bit j/32 of hmask[j % 32].
        hmask.fill(0);
        for (j, level) in levels.iter_mut().enumerate() {
            if *level > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                *level -= 4;
            }
        }
        pack_2bit(&levels, qs);
    }
}

// ----------------------------------------------------------------------------- Q4_K and Q5_K

/// Element `64p + 32n + l` (p pair, n nibble) is nibble n of `qs[32p + l]`, in sub-block
/// `2p + n`.
pub(crate) fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q4_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, 0);
        let min = read_f16(b, 2);
        let scales = &b[4..16];
        for (p, (q, y)) in b[16..144]
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc1, m1) = scale_min_k4(2 * p, scales);
            let (sc2, m2) = scale_min_k4(2 * p + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            for l in 0..32 {
                y[l] = d1 * f32::from(q[l] & 0xF) - m1;
                y[l + 32] = d2 * f32::from(q[l] >> 4) - m2;
            }
        }
    }
}

/// Element `64p + 32n + l` has its low 4 bits in nibble n of `qs[32p + l]` and its fifth bit
/// at bit 2p+n of `qh[l]`; sub-block `2p + n`.
pub(crate) fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q5_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, 0);
        let min = read_f16(b, 2);
        let scales = &b[4..16];
        let qh = &b[16..48];
        for (p, (ql, y)) in b[48..176]
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc1, m1) = scale_min_k4(2 * p, scales);
            let (sc2, m2) = scale_min_k4(2 * p + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let (u1, u2) = (1u8 << (2 * p), 2u8 << (2 * p));
            for l in 0..32 {
                let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
                let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
                y[l] = d1 * f32::from((ql[l] & 0xF) + h1) - m1;
                y[l + 32] = d2 * f32::from((ql[l] >> 4) + h2) - m2;
            }
        }
    }
}

/// The part of `quantize_row_q4_K_ref` and `quantize_row_q5_K_ref` before bit packing: fits
/// each 32-element sub-block with `asymmetric_weighted`, writes d, dmin and the packed scales
/// to `head` (16 bytes), and returns the levels requantized against the rounded scales.
fn quantize_k4_head(
    x: &[f32],
    nmax: i32,
    search: &AsymmetricSearch,
    head: &mut [u8],
) -> [u8; QK_K] {
    let mut levels = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: [f32; 32] = std::array::from_fn(|l| av_x + xs[l].abs());
        (scales[j], mins[j]) =
            asymmetric_weighted(xs, &weights, nmax, search, &mut levels[32 * j..32 * j + 32]);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    // ggml stores the rounded values in a uint8_t before clamping to 63.
    let ls: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_scale * scales[j]) as u8).min(63));
    let lm: [u8; 8] = std::array::from_fn(|j| (nearest_int(inv_min * mins[j]) as u8).min(63));
    pack_scale_min_k4(&ls, &lm, &mut head[4..16]);
    write_f16(head, 0, max_scale / 63.0);
    write_f16(head, 2, max_min / 63.0);

    let d_all = read_f16(head, 0);
    let m_all = read_f16(head, 2);
    for j in 0..8 {
        let (sc, m) = scale_min_k4(j, &head[4..16]);
        let d = d_all * f32::from(sc);
        if d == 0.0 {
            continue;
        }
        let dm = m_all * f32::from(m);
        for ii in 0..32 {
            levels[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / d).clamp(0, nmax) as u8;
        }
    }
    levels
}

/// ggml's `quantize_row_q4_K_ref`.
pub(crate) fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    let search = AsymmetricSearch {
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q4_K_BYTES)) {
        let (head, qs) = b.split_at_mut(16);
        let levels = quantize_k4_head(x, 15, &search, head);
        for (p, q) in qs.chunks_exact_mut(32).enumerate() {
            for l in 0..32 {
                q[l] = levels[64 * p + l] | (levels[64 * p + l + 32] << 4);
            }
        }
    }
}

/// ggml's `quantize_row_q5_K_ref`.
pub(crate) fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    let search = AsymmetricSearch {
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q5_K_BYTES)) {
        let (head, rest) = b.split_at_mut(16);
        let (qh, qs) = rest.split_at_mut(32);
        let levels = quantize_k4_head(x, 31, &search, head);
        qh.fill(0);
        for (p, ql) in qs.chunks_exact_mut(32).enumerate() {
            for l in 0..32 {
                let mut l1 = levels[64 * p + l];
                if l1 > 15 {
                    l1 -= 16;
                    qh[l] |= 1 << (2 * p);
                }
                let mut l2 = levels[64 * p + l + 32];
                if l2 > 15 {
                    l2 -= 16;
                    qh[l] |= 2 << (2 * p);
                }
                ql[l] = l1 | (l2 << 4);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------- Q6_K

/// Element `128h + 32k + l` (k in 0..4) has its low 4 bits in the low (k < 2) or high nibble
/// of `ql[64h + 32(k%2) + l]` and its top 2 bits at bits 2k.. of `qh[32h + l]`; sub-block
/// `8h + 2k + l/16`.
pub(crate) fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q6_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = read_f16(b, 208);
        for h in 0..2 {
            let ql = &b[64 * h..64 * h + 64];
            let qh = &b[128 + 32 * h..128 + 32 * h + 32];
            let sc = &b[192 + 8 * h..192 + 8 * h + 8];
            let y = &mut y[128 * h..128 * h + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
                y[l] = d * f32::from(sc[is] as i8) * f32::from(q1);
                y[l + 32] = d * f32::from(sc[is + 2] as i8) * f32::from(q2);
                y[l + 64] = d * f32::from(sc[is + 4] as i8) * f32::from(q3);
                y[l + 96] = d * f32::from(sc[is + 6] as i8) * f32::from(q4);
            }
        }
    }
}

/// ggml's `quantize_row_q6_K_ref`.
pub(crate) fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q6_K_BYTES)) {
        let mut levels = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for ib in 0..16 {
            let scale = symmetric_x2_weighted(
                &x[16 * ib..16 * ib + 16],
                32,
                &mut levels[16 * ib..16 * ib + 16],
            );
            scales[ib] = scale;
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = scale;
            }
        }
        if max_abs_scale < 1e-15 {
            b.fill(0);
            continue;
        }

        let (ql, rest) = b.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        let (packed_scales, d_bytes) = rest.split_at_mut(16);
        let iscale = -128.0 / max_scale;
        write_f16(d_bytes, 0, 1.0 / iscale);
        for (p, &s) in packed_scales.iter_mut().zip(&scales) {
            *p = nearest_int(iscale * s).min(127) as i8 as u8;
        }

        let d_all = read_f16(d_bytes, 0);
        for j in 0..16 {
            let d = d_all * f32::from(packed_scales[j] as i8);
            if d == 0.0 {
                continue;
            }
            for ii in 0..16 {
                levels[16 * j + ii] = (nearest_int(x[16 * j + ii] / d).clamp(-32, 31) + 32) as u8;
            }
        }

        for h in 0..2 {
            let l4 = &levels[128 * h..128 * h + 128];
            for l in 0..32 {
                ql[64 * h + l] = (l4[l] & 0xF) | ((l4[l + 64] & 0xF) << 4);
                ql[64 * h + l + 32] = (l4[l + 32] & 0xF) | ((l4[l + 96] & 0xF) << 4);
                qh[32 * h + l] = (l4[l] >> 4)
                    | ((l4[l + 32] >> 4) << 2)
                    | ((l4[l + 64] >> 4) << 4)
                    | ((l4[l + 96] >> 4) << 6);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------- Q8_K

pub(crate) fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(Q8_K_BYTES).zip(dst.chunks_exact_mut(QK_K)) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        for (v, &q) in y.iter_mut().zip(&b[4..4 + QK_K]) {
            *v = d * f32::from(q as i8);
        }
    }
}

/// ggml's `quantize_row_q8_K_ref`: the value of largest magnitude maps to −127 (not −128, which
/// ggml's SIMD dot products rely on), d is stored as f32, and bsums hold the sums of each 16.
pub(crate) fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(dst.chunks_exact_mut(Q8_K_BYTES)) {
        let mut max = 0.0f32;
        let mut amax = 0.0f32;
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax == 0.0 {
            b.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        let (d_bytes, rest) = b.split_at_mut(4);
        let (qs, bsums) = rest.split_at_mut(QK_K);
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for (sum, group) in bsums.chunks_exact_mut(2).zip(qs.chunks_exact(16)) {
            let s: i16 = group.iter().map(|&q| i16::from(q as i8)).sum();
            sum.copy_from_slice(&s.to_le_bytes());
        }
        d_bytes.copy_from_slice(&(1.0 / iscale).to_le_bytes());
    }
}
