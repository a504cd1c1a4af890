//! The elementwise and per-row operations in f32, vectorized, split across the pool by rows
//! when the batch is large enough to pay for it.

use std::sync::OnceLock;

use half::f16;
use half::slice::HalfFloatSliceExt;
use plumb_backend_ref::HostTensor;
use plumb_model::{Activation, Activations, Rope};
use wide::f32x8;

use crate::pool::{split, ThreadPool};
use crate::shared_out::SharedOut;

/// Elements below which an op runs on the calling thread alone.
const PARALLEL_MIN: usize = 1 << 15;

/// Applies `f(row_index, row)` to every row of `x`, on the pool when `x` is large.
fn for_each_row(pool: &ThreadPool, x: &mut HostTensor, f: &(dyn Fn(usize, &mut [f32]) + Sync)) {
    let (n, width) = (x.n_tokens(), x.width());
    if n * width < PARALLEL_MIN || n == 1 {
        for (t, row) in x.rows_mut().enumerate() {
            f(t, row);
        }
        return;
    }
    let data = SharedOut::new(x.data_mut());
    pool.run(&|i| {
        for t in split(n, i, pool.n_threads(), 1) {
            // SAFETY: each row belongs to one thread.
            f(t, unsafe { data.slice(t * width, width) });
        }
    });
}

fn lanes(s: &[f32]) -> f32x8 {
    f32x8::new(s.try_into().expect("8 lanes"))
}

fn sum_of_squares(x: &[f32]) -> f32 {
    let chunks = x.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    let mut acc = f32x8::ZERO;
    for c in chunks {
        let v = lanes(c);
        acc = v.mul_add(v, acc);
    }
    acc.reduce_add() + tail
}

/// RMSNorm over each group of `weight.len()` elements of every row.
pub fn rms_norm(pool: &ThreadPool, x: &HostTensor, weight: &[f32], eps: f32) -> HostTensor {
    let mut out = x.clone();
    for_each_row(pool, &mut out, &|_, row| {
        for group in row.chunks_exact_mut(weight.len()) {
            let mean = sum_of_squares(group) / group.len() as f32;
            let scale = 1.0 / (mean + eps).sqrt();
            for (v, &w) in group.iter_mut().zip(weight) {
                *v = *v * scale * w;
            }
        }
    });
    out
}

pub fn add_bias(pool: &ThreadPool, mut x: HostTensor, bias: &[f32]) -> HostTensor {
    for_each_row(pool, &mut x, &|_, row| {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    });
    x
}

/// Rotates every `head_dim`-wide head of row `t` by `angles[t]` (pairs as `rope` makes
/// them): the reference's angles, computed in f64 from [`Rope::theta`] and rounded to f32.
pub fn rope(
    pool: &ThreadPool,
    mut x: HostTensor,
    head_dim: usize,
    angles: &[(f32, f32)],
    rope: &Rope,
) -> HostTensor {
    let n_pairs = rope.n_rot / 2;
    for_each_row(pool, &mut x, &|t, row| {
        let angles = &angles[t * n_pairs..(t + 1) * n_pairs];
        for head in row.chunks_exact_mut(head_dim) {
            for (i, &(sin, cos)) in angles.iter().enumerate() {
                let (a, b) = rope.pair(i);
                let (xa, xb) = (head[a], head[b]);
                head[a] = xa * cos - xb * sin;
                head[b] = xa * sin + xb * cos;
            }
        }
    });
    x
}

/// `act(gate) ⊙ up`.
pub fn gated_activation(
    pool: &ThreadPool,
    gate: &HostTensor,
    up: &HostTensor,
    act: Activation,
) -> HostTensor {
    let mut out = gate.clone();
    for_each_row(pool, &mut out, &|t, row| match act {
        Activation::Silu => swiglu_row(row, up.row(t)),
        Activation::GeluTanh => geglu_row(row, up.row(t)),
    });
    out
}

/// `e^x`, with the argument clamped to ±87: `wide`'s exp returns 0 from ±88 on instead of
/// saturating, and `e^±87` is already past what any activation needs.
fn exp8(x: f32x8) -> f32x8 {
    x.fast_min(f32x8::splat(87.0))
        .fast_max(f32x8::splat(-87.0))
        .exp()
}

/// `silu(g) · u` in place over `gate`, eight lanes at a time.
fn swiglu_row(gate: &mut [f32], up: &[f32]) {
    let one = f32x8::splat(1.0);
    let silu = |x: f32x8| x / (one + exp8(-x));
    let mut chunks = gate.chunks_exact_mut(8);
    let mut up_chunks = up.chunks_exact(8);
    for (g, u) in (&mut chunks).zip(&mut up_chunks) {
        g.copy_from_slice(&(silu(lanes(g)) * lanes(u)).to_array());
    }
    for (g, &u) in chunks
        .into_remainder()
        .iter_mut()
        .zip(up_chunks.remainder())
    {
        *g = silu(f32x8::splat(*g)).to_array()[0] * u;
    }
}

/// `gelu(g) · u` in place over `gate`, as ggml's CPU backend computes it: GELU read from a
/// table indexed by the f16 rounding of `g` (and itself rounded to f16), 0 below −10 and the
/// identity above 10. This is llama.cpp's own rounding; matching it keeps gemma's logits
/// within llama.cpp's margins where the exact GELU drifts.
fn geglu_row(gate: &mut [f32], up: &[f32]) {
    let table = gelu_f16_table();
    let mut halves = [f16::ZERO; 64];
    for (g, u) in gate.chunks_mut(64).zip(up.chunks(64)) {
        let halves = &mut halves[..g.len()];
        halves.convert_from_f32_slice(g);
        for ((x, &u), h) in g.iter_mut().zip(u).zip(halves.iter()) {
            *x = if *x <= -10.0 {
                0.0
            } else if *x >= 10.0 {
                *x * u
            } else {
                table[usize::from(h.to_bits())] * u
            };
        }
    }
}

/// GELU (tanh approximation) of every f16 value, rounded to f16: ggml's `ggml_table_gelu_f16`.
fn gelu_f16_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                let gelu = 0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh());
                f16::from_f32(gelu).to_f32()
            })
            .collect()
    })
}

pub fn add(pool: &ThreadPool, a: &HostTensor, b: &HostTensor) -> HostTensor {
    let mut out = a.clone();
    for_each_row(pool, &mut out, &|t, row| {
        for (v, &y) in row.iter_mut().zip(b.row(t)) {
            *v += y;
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silu(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    fn gelu_tanh(x: f64) -> f64 {
        0.5 * x * (1.0 + (0.797_884_560_802_865_4 * (x + 0.044715 * x * x * x)).tanh())
    }

    #[test]
    fn vectorized_activations_match_their_definitions() {
        let pool = ThreadPool::new(1).unwrap();
        let xs: Vec<f32> = (-400..=400)
            .map(|i| i as f32 * 0.05)
            .chain([-100.0, 100.0, 0.0])
            .collect();
        let n = xs.len();
        let gate = HostTensor::new(1, n, xs.clone());
        let up = HostTensor::new(1, n, vec![1.0; n]);
        for (act, f) in [
            (Activation::Silu, silu as fn(f64) -> f64),
            (Activation::GeluTanh, gelu_tanh),
        ] {
            let out = gated_activation(&pool, &gate, &up, act);
            for (&x, &y) in xs.iter().zip(out.data()) {
                let expected = f(f64::from(x));
                let exact = 1e-6 * expected.abs().max(1.0);
                // GELU goes through f16, as in ggml: its input and output are rounded to 11
                // significant bits, and it is cut off at ±10.
                let tolerance = match act {
                    Activation::GeluTanh if x.abs() < 10.0 => {
                        let (x, step) = (f64::from(x), f64::from(x).abs() / 2048.0);
                        (f(x + step) - f(x - step)).abs() + expected.abs() / 2048.0 + 1e-7
                    }
                    _ => exact,
                };
                let err = (f64::from(y) - expected).abs();
                assert!(err <= tolerance, "{act:?}({x}) = {y}, expected {expected}");
            }
        }
    }

    #[test]
    fn rms_norm_normalizes_each_group() {
        let pool = ThreadPool::new(1).unwrap();
        let x = HostTensor::new(1, 4, vec![3.0, 4.0, 1.0, 1.0]);
        let y = rms_norm(&pool, &x, &[1.0, 2.0], 0.0);
        let r = (12.5f32).sqrt();
        let expected = [3.0 / r, 8.0 / r, 1.0, 2.0];
        for (a, b) in y.data().iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{:?}", y.data());
        }
    }

    #[test]
    fn large_batches_give_the_same_rows_on_any_thread_count() {
        let (n, width) = (300, 256);
        let data: Vec<f32> = (0..n * width)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let x = HostTensor::new(n, width, data);
        let weight: Vec<f32> = (0..width).map(|i| 1.0 + i as f32 / 100.0).collect();
        let one = ThreadPool::new(1).unwrap();
        let three = ThreadPool::new(3).unwrap();
        assert_eq!(
            rms_norm(&one, &x, &weight, 1e-6),
            rms_norm(&three, &x, &weight, 1e-6)
        );
        assert_eq!(
            gated_activation(&one, &x, &x, Activation::Silu),
            gated_activation(&three, &x, &x, Activation::Silu)
        );
    }
}
