//! Locally typical sampling: keep the tokens whose surprise is closest to the expected one.

use super::{Candidate, Candidates};

/// Orders the tokens by how far `-ln p` is from the entropy of the distribution and keeps
/// the closest ones until their probabilities add up to more than `p`; `p >= 1` keeps
/// everything. The result is in that order, not by logit.
pub fn typical(candidates: &mut Candidates, p: f32) {
    if p >= 1.0 || candidates.is_empty() {
        return;
    }
    candidates.sort();
    candidates.softmax();
    // A token of probability 0 (a logit of -inf) adds nothing to the entropy and is the
    // least typical of all.
    let entropy: f32 = candidates
        .as_slice()
        .iter()
        .filter(|c| c.p > 0.0)
        .map(|c| -c.p * c.p.ln())
        .sum();
    let mut scored: Vec<(f32, Candidate)> = candidates
        .as_slice()
        .iter()
        .map(|&c| {
            let score = if c.p > 0.0 {
                (-c.p.ln() - entropy).abs()
            } else {
                f32::INFINITY
            };
            (score, c)
        })
        .collect();
    // Stable, so that equal scores keep descending-logit order.
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut sum = 0.0f32;
    let mut keep = scored.len();
    for (i, (_, c)) in scored.iter().enumerate() {
        sum += c.p;
        if sum > p {
            keep = i + 1;
            break;
        }
    }
    let kept = scored.into_iter().take(keep).map(|(_, c)| c).collect();
    candidates.replace(kept, false);
}
