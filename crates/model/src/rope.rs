//! Rotary position embedding: which dimensions are paired, and the angle of each pair.
//!
//! The definition follows ggml's `ggml_rope_ext`: pair `i` of a head at position `p` has the
//! unscaled angle `θ_e = p · base^(−2i/n_rot) / factor_i` and the scaled one
//! `θ_i = freq_scale · θ_e`, and is rotated by `θ_i`, or with YaRN by a blend of the two:
//! `θ = θ_i·(1 − r_i) + θ_e·r_i`, where the ramp `r_i` is 1 for the fast pairs (below the first
//! correction dimension: they keep their angle) and 0 for the slow ones (beyond the second:
//! fully interpolated). The rotation is scaled by a magnitude, `attn_factor`, times YaRN's
//! `1 + 0.1·ln(1/freq_scale)`. Every backend computes the same angles; this module is where
//! they are defined.

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
    /// YaRN's blend of scaled and unscaled angles (`rope.scaling.type` yarn), else `None`.
    pub yarn: Option<Yarn>,
    /// The factor on the rotation, before YaRN's own (`rope.scaling.attn_factor`, else 1).
    pub attn_factor: f32,
}

/// YaRN's per-pair blend, as llama.cpp sets it up for a model whose scaling type is yarn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Yarn {
    /// How much of the ramp applies (llama.cpp's `yarn_ext_factor`: 1 for YaRN models).
    pub ext_factor: f32,
    /// The pair indices where the ramp starts and ends falling from 1 to 0.
    pub corr_dims: [f32; 2],
}

impl Yarn {
    /// YaRN with llama.cpp's defaults (`beta_fast` 32 and `beta_slow` 1 rotations) for a
    /// model trained on `n_ctx_orig` positions; the correction dimensions are computed in f32
    /// as ggml's `ggml_rope_yarn_corr_dims` does, since they are rounded to whole pairs.
    pub fn new(n_rot: usize, n_ctx_orig: usize, freq_base: f32) -> Self {
        const BETA_FAST: f32 = 32.0;
        const BETA_SLOW: f32 = 1.0;
        // The pair whose wavelength fits `n_rotations` times into the original context.
        let corr_dim = |n_rotations: f32| {
            n_rot as f32 * (n_ctx_orig as f32 / (n_rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * freq_base.ln())
        };
        let start = corr_dim(BETA_FAST).floor().max(0.0);
        let end = corr_dim(BETA_SLOW).ceil().min(n_rot as f32 - 1.0);
        Yarn {
            ext_factor: 1.0,
            corr_dims: [start, end],
        }
    }

    /// The share of the unscaled angle in pair `pair`'s: 1 below the first correction
    /// dimension, 0 beyond the second, linear between.
    fn ramp(&self, pair: usize) -> f64 {
        let [low, high] = self.corr_dims.map(f64::from);
        let y = (pair as f64 - low) / (high - low).max(0.001);
        (1.0 - y.clamp(0.0, 1.0)) * f64::from(self.ext_factor)
    }
}

impl Rope {
    /// The rotation angle of pair `pair` at position `pos`, computed in f64 so that the
    /// reference is exact to f32 precision even at long positions. It is proportional to
    /// `pos`, YaRN or not.
    pub fn theta(&self, pos: usize, pair: usize) -> f64 {
        let exponent = -2.0 * pair as f64 / self.n_rot as f64;
        let inv_freq = f64::from(self.freq_base).powf(exponent);
        let factor = self
            .freq_factors
            .as_ref()
            .map_or(1.0, |f| f64::from(f[pair]));
        let unscaled = pos as f64 * inv_freq / factor;
        let scaled = f64::from(self.freq_scale) * unscaled;
        match &self.yarn {
            None => scaled,
            Some(yarn) => {
                let mix = yarn.ramp(pair);
                scaled * (1.0 - mix) + unscaled * mix
            }
        }
    }

    /// The length the rotation scales each pair by: 1 but for YaRN and `attn_factor`.
    pub fn magnitude(&self) -> f64 {
        let yarn = match &self.yarn {
            Some(y) if y.ext_factor != 0.0 => 1.0 + 0.1 * (1.0 / f64::from(self.freq_scale)).ln(),
            _ => 1.0,
        };
        f64::from(self.attn_factor) * yarn
    }

    /// `(sin θ, cos θ)` of pair `pair` at position `pos`, each times [`Self::magnitude`].
    pub fn sin_cos(&self, pos: usize, pair: usize) -> (f64, f64) {
        let (sin, cos) = self.theta(pos, pair).sin_cos();
        let m = self.magnitude();
        (sin * m, cos * m)
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
            let (sin, cos) = self.sin_cos(pos, i);
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
            yarn: None,
            attn_factor: 1.0,
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

    #[test]
    fn yarn_keeps_fast_pairs_interpolates_slow_ones_and_scales_the_magnitude() {
        let mut r = rope(RopeStyle::Neox);
        r.n_rot = 16;
        r.freq_scale = 0.25;
        // With an original context of 256, pair 0.21 turns 32 times in it and pair 3.22 once:
        // ggml's correction dimensions are floor(0.21) = 0 and ceil(3.22) = 4. Pair 0 keeps
        // its angle, pair 2 is half-way, pairs from 4 on are fully interpolated.
        let yarn = Yarn::new(16, 256, 10000.0);
        assert_eq!(yarn.corr_dims, [0.0, 4.0]);
        r.yarn = Some(yarn);
        let plain = |pos: usize, pair: usize| pos as f64 * 10000f64.powf(-2.0 * pair as f64 / 16.0);
        assert!((r.theta(10, 0) - plain(10, 0)).abs() < 1e-12);
        assert!((r.theta(10, 2) - plain(10, 2) * (0.25 * 0.5 + 0.5)).abs() < 1e-12);
        assert!((r.theta(10, 6) - 0.25 * plain(10, 6)).abs() < 1e-12);
        let m = 1.0 + 0.1 * 4f64.ln();
        assert!((r.magnitude() - m).abs() < 1e-12);
        let (sin, cos) = r.sin_cos(10, 6);
        assert!((sin.hypot(cos) - m).abs() < 1e-12);
    }
}
