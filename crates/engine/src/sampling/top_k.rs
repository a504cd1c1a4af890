//! Top-k: keep the `k` most likely tokens.

use super::Candidates;

/// Keeps the `k` highest logits, sorted; `k = 0` keeps everything.
pub fn top_k(candidates: &mut Candidates, k: usize) {
    if k == 0 {
        return;
    }
    candidates.keep_top(k);
}
