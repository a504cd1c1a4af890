//! The elementwise and per-row operations, written out plainly. Other host backends reuse
//! the ones that only move data (`select_rows`) or cannot be done differently (`scale`).

use plumb_model::{Activation, Activations, Rope};

use crate::tensor::HostTensor;

/// RMSNorm over each group of `weight.len()` elements of every row, accumulated in f64.
pub fn rms_norm(x: &HostTensor, weight: &[f32], eps: f32) -> HostTensor {
    let mut out = x.clone();
    for group in out.data_mut().chunks_exact_mut(weight.len()) {
        let sum_sq: f64 = group.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
        let mean_sq = sum_sq / group.len() as f64;
        let scale = 1.0 / (mean_sq + f64::from(eps)).sqrt();
        for (v, &w) in group.iter_mut().zip(weight) {
            *v = (f64::from(*v) * scale) as f32 * w;
        }
    }
    out
}

pub fn add_bias(mut x: HostTensor, bias: &[f32]) -> HostTensor {
    for row in x.rows_mut() {
        for (v, b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
    x
}

pub fn scale(mut x: HostTensor, factor: f32) -> HostTensor {
    for v in x.data_mut() {
        *v *= factor;
    }
    x
}

/// Rotates every `head_dim`-wide head of row `t` by the angles of `positions[t]`.
pub fn rope(mut x: HostTensor, head_dim: usize, positions: &[usize], rope: &Rope) -> HostTensor {
    let width = x.width();
    for (row, &pos) in x.rows_mut().zip(positions) {
        let angles: Vec<(f64, f64)> = (0..rope.n_rot / 2).map(|i| rope.sin_cos(pos, i)).collect();
        for head in row[..width].chunks_exact_mut(head_dim) {
            for (i, &(sin, cos)) in angles.iter().enumerate() {
                let (a, b) = rope.pair(i);
                let (xa, xb) = (f64::from(head[a]), f64::from(head[b]));
                head[a] = (xa * cos - xb * sin) as f32;
                head[b] = (xa * sin + xb * cos) as f32;
            }
        }
    }
    x
}

/// `act(gate) ⊙ up`.
pub fn gated_activation(gate: &HostTensor, up: &HostTensor, act: Activation) -> HostTensor {
    let data = gate
        .data()
        .iter()
        .zip(up.data())
        .map(|(&g, &u)| (activate(f64::from(g), act) * f64::from(u)) as f32)
        .collect();
    HostTensor::new(gate.n_tokens(), gate.width(), data)
}

fn activate(x: f64, act: Activation) -> f64 {
    match act {
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::GeluTanh => {
            const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
            0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

pub fn add(a: &HostTensor, b: &HostTensor) -> HostTensor {
    let data = a.data().iter().zip(b.data()).map(|(x, y)| x + y).collect();
    HostTensor::new(a.n_tokens(), a.width(), data)
}

pub fn select_rows(x: &HostTensor, rows: &[usize]) -> HostTensor {
    let data = rows
        .iter()
        .flat_map(|&r| x.row(r).iter().copied())
        .collect();
    HostTensor::new(rows.len(), x.width(), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_normalizes_each_group() {
        let x = HostTensor::new(1, 4, vec![3.0, 4.0, 1.0, 1.0]);
        let y = rms_norm(&x, &[1.0, 2.0], 0.0);
        let r = (12.5f32).sqrt();
        let expected = [3.0 / r, 8.0 / r, 1.0, 2.0];
        for (a, b) in y.data().iter().zip(expected) {
            assert!((a - b).abs() < 1e-6, "{:?}", y.data());
        }
    }

    #[test]
    fn activations_match_their_definitions() {
        assert!((activate(1.0, Activation::Silu) - 0.731_058_578_630_074_4).abs() < 1e-12);
        assert_eq!(activate(0.0, Activation::GeluTanh), 0.0);
        // GELU-tanh at 1: 0.5·(1 + tanh(√(2/π)·1.044715)).
        assert!((activate(1.0, Activation::GeluTanh) - 0.841_191_990_607_527_5).abs() < 1e-12);
    }
}
