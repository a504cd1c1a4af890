//! Plain Rust kernels for every type of the family: the definition the SIMD kernels are
//! tested against, and the fallback on targets without them.
//!
//! Integer types follow ggml's generic `ggml_vec_dot_*_q8_*`: each block's products are
//! summed exactly in integers, then scaled and summed in f32 in block order. Float types
//! follow ggml's generic `ggml_vec_dot_f16` / `_bf16` / `_f32`: each product is rounded to
//! f32 and the products are summed in f64 (ggml's `ggml_float`), so the scalar float dot is
//! as accurate as the reference `dot_row` up to the rounding of each product.
//!
//! `dot_many` runs the same operations in the same order for each row as `dot`, so the two
//! agree bit for bit; it unpacks each weight block once for all rows.

use super::formats::{
    Iq4Nl, OffsetBlocks, SignedBlocks, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_0_BYTES, Q8_1_BYTES, QK,
};
use super::quantize;
use crate::fp::{bf16_to_f32, f16_to_f32, read_f16};
use crate::vec_dot::KernelFns;
use crate::GgmlType;

pub(super) fn kernel(weight_type: GgmlType) -> Option<KernelFns> {
    use GgmlType as T;
    Some(match weight_type {
        T::Q4_0 => signed::<Q4_0>(),
        T::Q5_0 => signed::<Q5_0>(),
        T::Q8_0 => signed::<Q8_0>(),
        T::IQ4_NL => signed::<Iq4Nl>(),
        T::Q4_1 => offset::<Q4_1>(),
        T::Q5_1 => offset::<Q5_1>(),
        T::F16 => float::<F16>(quantize::f16),
        T::BF16 => float::<Bf16>(quantize::bf16),
        T::F32 => float::<F32>(quantize::f32),
        _ => return None,
    })
}

fn signed<W: SignedBlocks>() -> KernelFns {
    KernelFns {
        act_type: GgmlType::Q8_0,
        quantize: quantize::q8_0,
        dot: |w, act| {
            let mut out = [0.0];
            signed_dot_many::<W>(w, act, &mut out);
            out[0]
        },
        dot_many: signed_dot_many::<W>,
    }
}

fn offset<W: OffsetBlocks>() -> KernelFns {
    KernelFns {
        act_type: GgmlType::Q8_1,
        quantize: quantize::q8_1,
        dot: |w, act| {
            let mut out = [0.0];
            offset_dot_many::<W>(w, act, &mut out);
            out[0]
        },
        dot_many: offset_dot_many::<W>,
    }
}

fn float<F: FloatFormat>(quantize: fn(&[f32], &mut [u8])) -> KernelFns {
    KernelFns {
        act_type: F::TYPE,
        quantize,
        dot: |w, act| {
            let mut out = [0.0];
            float_dot_many::<F>(w, act, &mut out);
            out[0]
        },
        dot_many: float_dot_many::<F>,
    }
}

fn signed_dot_many<W: SignedBlocks>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    out.fill(0.0);
    let row_bytes = w.len() / W::BYTES * Q8_0_BYTES;
    for (ib, block) in w.chunks_exact(W::BYTES).enumerate() {
        let (d, q) = W::unpack(block);
        for (r, sum) in out.iter_mut().enumerate() {
            let start = r * row_bytes + ib * Q8_0_BYTES;
            let a = &acts[start..start + Q8_0_BYTES];
            let isum: i32 = q
                .iter()
                .zip(&a[2..])
                .map(|(&x, &y)| i32::from(x) * i32::from(y as i8))
                .sum();
            *sum += isum as f32 * (d * read_f16(a, 0));
        }
    }
}

fn offset_dot_many<W: OffsetBlocks>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    out.fill(0.0);
    let row_bytes = w.len() / W::BYTES * Q8_1_BYTES;
    for (ib, block) in w.chunks_exact(W::BYTES).enumerate() {
        let (d, m, q) = W::unpack(block);
        for (r, sum) in out.iter_mut().enumerate() {
            let start = r * row_bytes + ib * Q8_1_BYTES;
            let a = &acts[start..start + Q8_1_BYTES];
            let isum: i32 = q
                .iter()
                .zip(&a[4..])
                .map(|(&x, &y)| i32::from(x) * i32::from(y as i8))
                .sum();
            *sum += (d * read_f16(a, 0)) * isum as f32 + m * read_f16(a, 2);
        }
    }
}

/// A float format: weights and activations are both stored in it.
trait FloatFormat {
    const TYPE: GgmlType;
    const BYTES: usize;
    fn get(bytes: &[u8]) -> f32;
}

struct F16;
struct Bf16;
struct F32;

impl FloatFormat for F16 {
    const TYPE: GgmlType = GgmlType::F16;
    const BYTES: usize = 2;
    fn get(b: &[u8]) -> f32 {
        f16_to_f32(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl FloatFormat for Bf16 {
    const TYPE: GgmlType = GgmlType::BF16;
    const BYTES: usize = 2;
    fn get(b: &[u8]) -> f32 {
        bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))
    }
}

impl FloatFormat for F32 {
    const TYPE: GgmlType = GgmlType::F32;
    const BYTES: usize = 4;
    fn get(b: &[u8]) -> f32 {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
}

/// Rows are taken four at a time so that each weight chunk is converted once per four rows
/// while their f64 sums stay in registers.
fn float_dot_many<F: FloatFormat>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    const ROWS: usize = 4;
    let chunk_bytes = QK * F::BYTES;
    let row_bytes = w.len() / F::BYTES * F::BYTES;
    let mut weights = [0f32; QK];
    for (g, outs) in out.chunks_mut(ROWS).enumerate() {
        let mut sums = [0f64; ROWS];
        for (ic, chunk) in w[..row_bytes].chunks(chunk_bytes).enumerate() {
            let weights = &mut weights[..chunk.len() / F::BYTES];
            for (v, b) in weights.iter_mut().zip(chunk.chunks_exact(F::BYTES)) {
                *v = F::get(b);
            }
            for (r, sum) in sums[..outs.len()].iter_mut().enumerate() {
                let start = (g * ROWS + r) * row_bytes + ic * chunk_bytes;
                let a = &acts[start..start + chunk.len()];
                for (&x, y) in weights.iter().zip(a.chunks_exact(F::BYTES)) {
                    *sum += f64::from(x * F::get(y));
                }
            }
        }
        for (o, sum) in outs.iter_mut().zip(sums) {
            *o = sum as f32;
        }
    }
}
