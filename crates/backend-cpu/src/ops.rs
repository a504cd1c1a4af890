//! The elementwise and per-row operations in f32, split across the pool by rows when the
//! batch is large enough to pay for it. RMSNorm and the gated activations run the vectorized
//! [`RowKernels`] of this machine's instruction set.

use plumb_backend_ref::HostTensor;
use plumb_model::{Activation, Activations, Rope};

use crate::pool::{split, ThreadPool};
use crate::row_kernels::RowKernels;
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

/// RMSNorm over each group of `weight.len()` elements of every row.
pub fn rms_norm(
    kernels: &RowKernels,
    pool: &ThreadPool,
    x: &HostTensor,
    weight: &[f32],
    eps: f32,
) -> HostTensor {
    let mut out = x.clone();
    for_each_row(pool, &mut out, &|_, row| {
        for group in row.chunks_exact_mut(weight.len()) {
            kernels.rms_norm(group, weight, eps);
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
    kernels: &RowKernels,
    pool: &ThreadPool,
    gate: &HostTensor,
    up: &HostTensor,
    act: Activation,
) -> HostTensor {
    let mut out = gate.clone();
    for_each_row(pool, &mut out, &|t, row| match act {
        Activation::Silu => kernels.swiglu(row, up.row(t)),
        Activation::GeluTanh => kernels.geglu(row, up.row(t)),
    });
    out
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

    #[test]
    fn rms_norm_normalizes_each_group() {
        let pool = ThreadPool::new(1).unwrap();
        let x = HostTensor::new(1, 4, vec![3.0, 4.0, 1.0, 1.0]);
        let y = rms_norm(&RowKernels::detect(), &pool, &x, &[1.0, 2.0], 0.0);
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
        let k = RowKernels::detect();
        assert_eq!(
            rms_norm(&k, &one, &x, &weight, 1e-6),
            rms_norm(&k, &three, &x, &weight, 1e-6)
        );
        for act in [Activation::Silu, Activation::GeluTanh] {
            assert_eq!(
                gated_activation(&k, &one, &x, &x, act),
                gated_activation(&k, &three, &x, &x, act)
            );
        }
    }
}
