//! Top-n-sigma: keep the tokens whose logit is within `n` standard deviations of the largest.

use super::Candidates;

/// Keeps the logits at least `max - n·σ`, where the mean and σ are over the finite logits;
/// `n <= 0` keeps everything.
pub fn top_n_sigma(candidates: &mut Candidates, n: f32) {
    if n <= 0.0 || candidates.len() <= 1 {
        return;
    }
    let finite = || {
        candidates
            .as_slice()
            .iter()
            .map(|c| c.logit)
            .filter(|l| l.is_finite())
    };
    let count = finite().count();
    if count == 0 {
        return;
    }
    let max = finite().fold(f32::NEG_INFINITY, f32::max);
    let mean = finite().sum::<f32>() / count as f32;
    let variance = finite().map(|l| (l - mean) * (l - mean)).sum::<f32>() / count as f32;
    let threshold = max - n * variance.sqrt();
    candidates.retain(|c| c.logit >= threshold);
}
