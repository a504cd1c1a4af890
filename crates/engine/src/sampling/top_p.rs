//! Top-p (nucleus): keep the most likely tokens whose probabilities add up to at least `p`.

use super::Candidates;

/// Keeps the shortest prefix, in descending logit order, whose probability (softmax over
/// all candidates) reaches `p`; `p >= 1` keeps everything.
pub fn top_p(candidates: &mut Candidates, p: f32) {
    if p >= 1.0 {
        return;
    }
    candidates.sort();
    candidates.softmax();
    let mut sum = 0.0f32;
    let mut keep = candidates.len();
    for (i, c) in candidates.as_slice().iter().enumerate() {
        sum += c.p;
        if sum >= p {
            keep = i + 1;
            break;
        }
    }
    candidates.truncate(keep);
}
