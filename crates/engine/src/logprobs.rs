//! Log-probabilities of generated tokens, as OpenAI's `logprobs` reports them: from the
//! model's own distribution (the log-softmax of the raw logits), not from what the sampler
//! chain made of it, so that they mean the same whatever the sampling settings.

use crate::request::TokenLogprob;

/// `token`'s log-probability under `logits` and the `top` most likely tokens with theirs,
/// most likely first (lower id first among equals, as greedy decoding picks).
pub(crate) fn token_logprob(logits: &[f32], token: u32, top: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    // f64 sums: 150k terms in f32 would lose the small ones.
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = f64::from(max) + sum.ln();
    let logprob = |l: f32| (f64::from(l) - log_z).min(0.0) as f32;
    let chosen = logits
        .get(token as usize)
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    TokenLogprob {
        token,
        logprob: logprob(chosen),
        top: top_logits(logits, top)
            .into_iter()
            .map(|(id, l)| (id, logprob(l)))
            .collect(),
    }
}

/// The `k` largest logits with their ids, largest first, in one pass: `k` is small (OpenAI
/// allows 20) and the vocabulary large, so a short sorted list beats sorting.
fn top_logits(logits: &[f32], k: usize) -> Vec<(u32, f32)> {
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k == 0 {
        return best;
    }
    for (id, &l) in logits.iter().enumerate() {
        if best.len() == k && best[k - 1].1 >= l {
            continue;
        }
        // After every equal logit already kept: lower ids first.
        let at = best.partition_point(|&(_, b)| b >= l);
        best.insert(at, (id as u32, l));
        best.truncate(k);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_and_top_is_sorted() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let lp = token_logprob(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((f64::from(lp.logprob) - (2.0 - z.ln())).abs() < 1e-6);
        let ids: Vec<u32> = lp.top.iter().map(|&(id, _)| id).collect();
        assert_eq!(ids, [1, 3, 2]);
        assert_eq!(lp.top[0].1, lp.top[1].1);
        let total: f64 = (0..logits.len() as u32)
            .map(|id| f64::from(token_logprob(&logits, id, 0).logprob).exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-5, "{total}");
    }

    #[test]
    fn top_k_larger_than_the_vocabulary_lists_everything() {
        let lp = token_logprob(&[0.0, 0.0], 1, 5);
        assert_eq!(lp.top.len(), 2);
        assert!((lp.logprob - 0.5f32.ln()).abs() < 1e-6);
    }
}
