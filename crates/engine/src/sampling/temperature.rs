//! Temperature: sharpen or flatten the distribution.

use super::Candidates;

/// Divides every logit by `temp`. At `temp <= 0` only the most likely token stays (the first
/// of equals in the current order): greedy decoding.
pub fn temperature(candidates: &mut Candidates, temp: f32) {
    if temp <= 0.0 {
        let best =
            candidates
                .as_slice()
                .iter()
                .enumerate()
                .fold(None::<(usize, f32)>, |best, (i, c)| match best {
                    Some((_, logit)) if logit >= c.logit => best,
                    _ => Some((i, c.logit)),
                });
        if let Some((i, _)) = best {
            let chosen = candidates.as_slice()[i];
            candidates.replace(vec![chosen], true);
        }
        return;
    }
    // A positive scale keeps the order.
    for c in candidates.items_mut() {
        c.logit /= temp;
    }
}
