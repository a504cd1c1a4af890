//! Min-p: drop the tokens less likely than `p` times the most likely one.

use super::Candidates;

/// Keeps the tokens with probability at least `p · p_max`, i.e. with a logit at least
/// `max + ln p`, in their current order; `p <= 0` keeps everything. The most likely token
/// always stays.
pub fn min_p(candidates: &mut Candidates, p: f32) {
    if p <= 0.0 {
        return;
    }
    let Some(max) = candidates.max_logit() else {
        return;
    };
    let threshold = max + p.ln();
    if threshold > max {
        // p > 1 would drop everything; llama.cpp keeps the top token.
        candidates.keep_top(1);
        return;
    }
    candidates.retain(|c| c.logit >= threshold);
}
