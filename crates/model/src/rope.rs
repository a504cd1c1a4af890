//! Rotary position embedding: which dimensions are paired, and the angle of each pair.
//!
//! The definition follows ggml's `ggml_rope_ext` without YaRN: pair `i` of a head at position
//! `p` is rotated by `θ = p · freq_scale · base^(−2i/n_rot) / factor_i`. Every backend computes
//! the same angles; this module is where they are defined.

use std::sync::Arc;

/// How the rotated dimensions of a head are paired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(2i, 2i+1)`: the original RoPE, used by llama. Llama GGUFs have Q and K
    /// already permuted by the converter so that this pairing is correct.
    Normal,
    /// Halves `(i, i + n_rot/2)`, as in GPT-NeoX: used by qwen2 and gemma3.
    Neox,
}

/// The rotary embedding of one attention layer.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    pub style: RopeStyle,
    /// Rotated dimensions at the start of each head (`rope.dimension_count`); the rest pass
    /// through unchanged.
    pub n_rot: usize,
    /// `rope.freq_base`.
    pub freq_base: f32,
    /// 1 / `rope.scaling.factor` for linear scaling, else 1.
    pub freq_scale: f32,
    /// Per-pair divisors of the frequency (`rope_freqs.weight`, Llama 3.1 and later), if any.
    pub freq_factors: Option<Arc<[f32]>>,
}

impl Rope {
    /// The rotation angle of pair `pair` at position `pos`, computed in f64 so that the
    /// reference is exact to f32 precision even at long positions.
    pub fn theta(&self, pos: usize, pair: usize) -> f64 {
        let exponent = -2.0 * pair as f64 / self.n_rot as f64;
        let inv_freq = f64::from(self.freq_base).powf(exponent);
        let factor = self
            .freq_factors
            .as_ref()
            .map_or(1.0, |f| f64::from(f[pair]));
        pos as f64 * f64::from(self.freq_scale) * inv_freq / factor
    }

    /// The index pairs `(a, b)` rotated together within one head, pair `i` first.
    pub fn pair(&self, i: usize) -> (usize, usize) {
        match self.style {
            RopeStyle::Normal => (2 * i, 2 * i + 1),
            RopeStyle::Neox => (i, i + self.n_rot / 2),
        }
    }

    /// Rotates one head in place: for each pair, `(a, b) ← (a·cos θ − b·sin θ, a·sin θ + b·cos θ)`.
    pub fn rotate_head(&self, head: &mut [f32], pos: usize) {
        for i in 0..self.n_rot / 2 {
            let (sin, cos) = self.theta(pos, i).sin_cos();
            let (a, b) = self.pair(i);
            let (xa, xb) = (f64::from(head[a]), f64::from(head[b]));
            head[a] = (xa * cos - xb * sin) as f32;
            head[b] = (xa * sin + xb * cos) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rope(style: RopeStyle) -> Rope {
        Rope {
            style,
            n_rot: 4,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
        }
    }

    #[test]
    fn position_zero_is_identity() {
        let mut head = [1.0, 2.0, 3.0, 4.0, 5.0];
        rope(RopeStyle::Neox).rotate_head(&mut head, 0);
        assert_eq!(head, [1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn normal_rotates_adjacent_pairs_and_neox_rotates_halves() {
        // Pair 0 has frequency 1, so at position 1 it turns by exactly 1 radian; pair 1 turns by
        // 10000^(-1/2) = 0.01 radians. Dimension 4 is beyond n_rot and must pass through.
        let (s, c) = 1f64.sin_cos();
        let (s1, c1) = 0.01f64.sin_cos();

        let mut head = [1.0, 0.0, 1.0, 0.0, 7.0];
        rope(RopeStyle::Normal).rotate_head(&mut head, 1);
        let expected = [c, s, c1, s1, 7.0];
        for (x, e) in head.iter().zip(expected) {
            assert!((f64::from(*x) - e).abs() < 1e-6, "{head:?}");
        }

        let mut head = [1.0, 1.0, 0.0, 0.0, 7.0];
        rope(RopeStyle::Neox).rotate_head(&mut head, 1);
        let expected = [c, c1, s, s1, 7.0];
        for (x, e) in head.iter().zip(expected) {
            assert!((f64::from(*x) - e).abs() < 1e-6, "{head:?}");
        }
    }

    #[test]
    fn linear_scaling_and_freq_factors_slow_the_rotation() {
        let mut r = rope(RopeStyle::Normal);
        r.freq_scale = 0.25;
        assert!((r.theta(8, 0) - 2.0).abs() < 1e-12);
        r.freq_scale = 1.0;
        r.freq_factors = Some(vec![4.0, 1.0].into());
        assert!((r.theta(8, 0) - 2.0).abs() < 1e-12);
        assert!((r.theta(100, 1) - 1.0).abs() < 1e-12);
    }
}
