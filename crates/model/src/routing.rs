//! Mixture-of-experts routing: which experts a token's FFN input goes to, and how much each
//! expert's output counts, as llama.cpp's softmax gating with normalized weights (`norm_w`)
//! decides it for Mixtral and Qwen3-MoE.

/// One expert a token is routed to, and the weight of its output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    pub expert: usize,
    pub weight: f32,
}

/// The smallest sum of the chosen probabilities llama.cpp divides by (`ggml_clamp` before its
/// normalization); softmax probabilities of the most likely experts never come near it.
const MIN_WEIGHT_SUM: f64 = 6.103515625e-5;

/// Routes a token by its router logits: the softmax over all experts, the `n_used` most
/// probable (the lower index first among equals), in order of probability, their
/// probabilities divided by their sum. Computed in f64 and rounded once.
pub fn route(logits: &[f32], n_used: usize) -> Vec<Route> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f64> = logits
        .iter()
        .map(|&l| (f64::from(l) - f64::from(max)).exp())
        .collect();
    let total: f64 = exps.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // Stable: equal logits keep the lower index first.
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    order.truncate(n_used);
    let chosen: f64 = order.iter().map(|&e| exps[e] / total).sum();
    let sum = chosen.max(MIN_WEIGHT_SUM);
    order
        .into_iter()
        .map(|expert| Route {
            expert,
            weight: (exps[expert] / total / sum) as f32,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_to_the_most_probable_experts_with_weights_that_sum_to_one() {
        // Experts 2 and 0 lead; their probabilities e²/(e²+e¹) and e¹/(e²+e¹) after
        // renormalization, whatever the others' logits.
        let routes = route(&[1.0, -3.0, 2.0, 0.5], 2);
        assert_eq!(routes.iter().map(|r| r.expert).collect::<Vec<_>>(), [2, 0]);
        let e = std::f64::consts::E;
        assert!((f64::from(routes[0].weight) - e / (e + 1.0)).abs() < 1e-7);
        assert!((f64::from(routes[1].weight) - 1.0 / (e + 1.0)).abs() < 1e-7);
        // Ties go to the lower index.
        let tied = route(&[0.0, 1.0, 1.0], 1);
        assert_eq!(tied[0].expert, 1);
        assert_eq!(tied[0].weight, 1.0);
    }
}
