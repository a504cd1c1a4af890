//! The Hadamard rotation llama.cpp applies around a quantized KV cache.
//!
//! A few channels of keys (qwen2.5's, after their bias) are far larger than the rest, and an
//! 8-bit block scaled to its largest value then rounds the others to almost nothing. Rotating
//! each head by an orthonormal Walsh–Hadamard matrix H spreads those channels over the whole
//! block before it is quantized. Attention is unchanged in exact arithmetic: queries are
//! rotated like the keys (Hq·Hk = q·k), values are rotated before they are stored, and since
//! H is symmetric and H·H = I, rotating the attention output again restores it.
//!
//! As llama.cpp does (`attn_rot_k`/`attn_rot_v`, PR #21038), the rotation is on only for a
//! quantized cache whose heads are a multiple of 64 wide in every layer; keys and queries are
//! rotated in groups of the largest power of two (from 64) that divides the key head, values
//! and outputs in groups of 64.

use plumb_backend_ref::HostTensor;
use plumb_model::LayerKv;

use crate::kv_storage::KvCacheType;

/// The smallest rotation, and the one values use.
const MIN_GROUP: usize = 64;

/// Group sizes of the rotations a cache needs, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvRotation {
    /// Keys and queries, if rotated.
    pub keys: Option<usize>,
    /// Values and attention outputs, if rotated.
    pub values: Option<usize>,
}

impl KvRotation {
    pub fn for_cache(cache_type: KvCacheType, layers: &[LayerKv]) -> KvRotation {
        let quantized = cache_type == KvCacheType::Q8_0;
        let same_width = |width: fn(&LayerKv) -> usize| {
            let first = layers.first().map(width)?;
            layers.iter().all(|l| width(l) == first).then_some(first)
        };
        let rotated = |width: Option<usize>| {
            width.filter(|w| quantized && *w > 0 && w.is_multiple_of(MIN_GROUP))
        };
        KvRotation {
            keys: rotated(same_width(|l| l.head_dim_k)).map(|w| {
                let mut group = MIN_GROUP;
                while w.is_multiple_of(2 * group) {
                    group *= 2;
                }
                group
            }),
            values: rotated(same_width(|l| l.head_dim_v)).map(|_| MIN_GROUP),
        }
    }
}

/// `x` with every run of `group` values (a power of two) of every row multiplied by the
/// orthonormal Walsh–Hadamard matrix of that size.
pub fn rotate(mut x: HostTensor, group: usize) -> HostTensor {
    // 1/√n as llama.cpp's generator rounds it.
    let norm = (1.0 / f64::from((group as f32).sqrt())) as f32;
    for row in x.rows_mut() {
        for chunk in row.chunks_exact_mut(group) {
            walsh_hadamard(chunk);
            for v in chunk.iter_mut() {
                *v *= norm;
            }
        }
    }
    x
}

/// The unnormalized transform in place: `y_i = Σ_j (−1)^popcount(i & j) x_j`, the Sylvester
/// matrix of llama.cpp's `ggml_gen_hadamard`.
fn walsh_hadamard(x: &mut [f32]) {
    let mut h = 1;
    while h < x.len() {
        for pair in x.chunks_exact_mut(2 * h) {
            let (a, b) = pair.split_at_mut(h);
            for (a, b) in a.iter_mut().zip(b) {
                (*a, *b) = (*a + *b, *a - *b);
            }
        }
        h *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(head_dim_k: usize, head_dim_v: usize) -> LayerKv {
        LayerKv::new(2, head_dim_k, head_dim_v, None)
    }

    /// The matrix llama.cpp builds: H[i][j] = ±1/√n, − where i & j has an odd popcount.
    fn hadamard_entry(n: usize, i: usize, j: usize) -> f64 {
        let sign = if (i & j).count_ones().is_multiple_of(2) {
            1.0
        } else {
            -1.0
        };
        sign / (n as f64).sqrt()
    }

    #[test]
    fn rotation_is_the_hadamard_matrix_and_its_own_inverse() {
        for n in [64, 128, 256] {
            let x: Vec<f32> = (0..2 * n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let rotated = rotate(HostTensor::new(1, 2 * n, x.clone()), n);
            for (g, chunk) in x.chunks_exact(n).enumerate() {
                for i in 0..n {
                    let want: f64 = (0..n)
                        .map(|j| hadamard_entry(n, i, j) * f64::from(chunk[j]))
                        .sum();
                    let got = f64::from(rotated.row(0)[g * n + i]);
                    assert!(
                        (got - want).abs() < 1e-4,
                        "n {n} group {g} row {i}: {got} vs {want}"
                    );
                }
            }
            let back = rotate(rotated, n);
            for (a, b) in back.row(0).iter().zip(&x) {
                assert!((a - b).abs() < 1e-4, "n {n}: H·H·x = {a}, x = {b}");
            }
        }
    }

    #[test]
    fn only_quantized_caches_with_heads_in_64s_are_rotated() {
        let q8 = KvCacheType::Q8_0;
        let on = |k, v| KvRotation { keys: k, values: v };
        assert_eq!(
            KvRotation::for_cache(q8, &[layer(64, 64)]),
            on(Some(64), Some(64))
        );
        assert_eq!(
            KvRotation::for_cache(q8, &[layer(128, 128)]),
            on(Some(128), Some(64))
        );
        assert_eq!(
            KvRotation::for_cache(q8, &[layer(256, 256)]),
            on(Some(256), Some(64))
        );
        assert_eq!(
            KvRotation::for_cache(q8, &[layer(192, 96)]),
            on(Some(64), None)
        );
        assert_eq!(
            KvRotation::for_cache(q8, &[layer(128, 64), layer(64, 64)]),
            on(None, Some(64))
        );
        for cache in [KvCacheType::F16, KvCacheType::F32] {
            assert_eq!(
                KvRotation::for_cache(cache, &[layer(64, 64)]),
                on(None, None)
            );
        }
    }
}
