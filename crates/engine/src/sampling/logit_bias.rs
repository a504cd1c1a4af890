//! Logit bias: add a fixed amount to chosen tokens' logits (`-inf` bans a token).

use super::Candidates;

/// Adds each `(token, bias)` to that token's logit.
pub fn logit_bias(candidates: &mut Candidates, biases: &[(u32, f32)]) {
    if biases.is_empty() {
        return;
    }
    let items = candidates.logits_mut();
    for &(token, bias) in biases {
        // At the head of the chain the candidates are the vocabulary in id order.
        let index = match items.get(token as usize) {
            Some(c) if c.id == token => Some(token as usize),
            _ => items.iter().position(|c| c.id == token),
        };
        if let Some(i) = index {
            items[i].logit += bias;
        }
    }
}
