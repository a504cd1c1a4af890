//! Perplexity the way llama-perplexity computes it, and the KL divergence between two runs'
//! next-token distributions (llama.cpp's `--kl-divergence`).
//!
//! The text is cut into non-overlapping windows of `n_ctx` tokens (the tail that does not fill
//! a window is dropped). For vocabularies that add BOS, the first token of each window is
//! replaced by BOS. Each window is evaluated from an empty cache, and only the second half is
//! scored: the logits at positions `n_ctx/2 .. n_ctx-1` against the token that follows, so
//! every scored token has at least `n_ctx/2` tokens of context.

/// The evaluation windows of a tokenized text.
pub fn windows(tokens: &[u32], n_ctx: usize, bos: Option<u32>) -> Vec<Vec<u32>> {
    tokens
        .chunks_exact(n_ctx)
        .map(|w| {
            let mut w = w.to_vec();
            if let Some(bos) = bos {
                w[0] = bos;
            }
            w
        })
        .collect()
}

/// The window positions whose logits are scored.
pub fn scored_positions(n_ctx: usize) -> std::ops::Range<usize> {
    n_ctx / 2..n_ctx - 1
}

/// `log softmax(logits)`, computed in f64.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    logits.iter().map(|&l| l as f64 - log_z).collect()
}

/// A running mean of per-token negative log-likelihoods, with its standard error.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NllMean {
    sum: f64,
    sum_sq: f64,
    count: usize,
}

impl NllMean {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum_sq += nll * nll;
        self.count += 1;
    }

    pub fn count(&self) -> usize {
        self.count
    }

    pub fn mean(&self) -> f64 {
        self.sum / self.count.max(1) as f64
    }

    /// Standard error of the mean.
    pub fn std_error(&self) -> f64 {
        if self.count < 2 {
            return f64::NAN;
        }
        let n = self.count as f64;
        let var = (self.sum_sq / n - self.mean() * self.mean()).max(0.0);
        (var / (n - 1.0)).sqrt()
    }

    pub fn perplexity(&self) -> f64 {
        self.mean().exp()
    }

    /// The perplexity's error, propagated from the mean's (d exp(m) = exp(m) dm).
    pub fn perplexity_error(&self) -> f64 {
        self.perplexity() * self.std_error()
    }
}

/// The next-token distributions of two runs of the same tokens compared position by position
/// (`KL(base ‖ test)` from their `result_output` logits), or `None` when either run lacks
/// them or their shapes differ.
pub fn next_token_kl(base: &crate::Trace, test: &crate::Trace) -> Option<KlStats> {
    let (a, b) = (base.get("result_output")?, test.get("result_output")?);
    let n_vocab = *a.shape.first()?;
    if a.shape != b.shape || n_vocab == 0 {
        return None;
    }
    let mut stats = KlStats::default();
    for (p, q) in a
        .data
        .chunks_exact(n_vocab)
        .zip(b.data.chunks_exact(n_vocab))
    {
        stats.add(&log_softmax(p), &log_softmax(q));
    }
    Some(stats)
}

/// KL divergence and top-1 agreement of one run against a base run, token by token.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KlStats {
    kl: Vec<f64>,
    top1_same: usize,
}

impl KlStats {
    /// Adds one position: `base` and `test` are full log-probability rows.
    pub fn add(&mut self, base: &[f64], test: &[f64]) {
        let kl: f64 = base
            .iter()
            .zip(test)
            .map(|(&p, &q)| {
                if p == f64::NEG_INFINITY {
                    0.0
                } else {
                    p.exp() * (p - q)
                }
            })
            .sum();
        self.kl.push(kl.max(0.0));
        self.top1_same += usize::from(argmax(base) == argmax(test));
    }

    pub fn count(&self) -> usize {
        self.kl.len()
    }

    pub fn mean(&self) -> f64 {
        self.kl.iter().sum::<f64>() / self.kl.len().max(1) as f64
    }

    /// The `q`-quantile (0 ≤ q ≤ 1) of the per-token KL divergences, nearest rank.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.kl.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.kl.clone();
        sorted.sort_by(f64::total_cmp);
        let i = ((q * (sorted.len() - 1) as f64).round() as usize).min(sorted.len() - 1);
        sorted[i]
    }

    /// The largest per-token KL divergence and its index, or `None` before the first.
    pub fn max(&self) -> Option<(usize, f64)> {
        self.kl
            .iter()
            .copied()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    pub fn top1_agreement(&self) -> f64 {
        self.top1_same as f64 / self.kl.len().max(1) as f64
    }
}

fn argmax(values: &[f64]) -> usize {
    values
        .iter()
        .enumerate()
        .fold((0, f64::NEG_INFINITY), |best, (i, &v)| {
            if v > best.1 {
                (i, v)
            } else {
                best
            }
        })
        .0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_drop_the_tail_and_replace_the_first_token() {
        let tokens: Vec<u32> = (10..21).collect();
        let w = windows(&tokens, 4, Some(1));
        assert_eq!(w, [vec![1, 11, 12, 13], vec![1, 15, 16, 17]]);
        assert_eq!(windows(&tokens, 4, None)[1], [14, 15, 16, 17]);
        assert_eq!(scored_positions(512), 256..511);
        assert_eq!(scored_positions(512).len(), 255);
    }

    #[test]
    fn log_softmax_of_known_rows() {
        let l = log_softmax(&[0.0, 0.0]);
        assert!((l[0] - 0.5f64.ln()).abs() < 1e-12);
        let l = log_softmax(&[1000.0, 0.0]);
        assert!(l[0].abs() < 1e-12 && (l[1] + 1000.0).abs() < 1e-9);
    }

    #[test]
    fn perplexity_and_error() {
        let mut m = NllMean::default();
        for nll in [1.0, 2.0, 3.0] {
            m.add(nll);
        }
        assert!((m.perplexity() - 2f64.exp()).abs() < 1e-12);
        // Sample standard deviation 1, so the standard error is 1/sqrt(3).
        assert!((m.std_error() - 1.0 / 3f64.sqrt()).abs() < 1e-12);
        assert!(NllMean::default().std_error().is_nan());
    }

    #[test]
    fn kl_of_identical_and_shifted_distributions() {
        let p = log_softmax(&[2.0, 1.0, 0.0]);
        let q = log_softmax(&[0.0, 1.0, 2.0]);
        let mut same = KlStats::default();
        same.add(&p, &p);
        assert!(same.mean().abs() < 1e-15);
        assert_eq!(same.top1_agreement(), 1.0);
        let mut diff = KlStats::default();
        diff.add(&p, &q);
        let expected: f64 = p.iter().zip(&q).map(|(a, b)| a.exp() * (a - b)).sum();
        assert!((diff.mean() - expected).abs() < 1e-12 && expected > 0.5);
        assert_eq!(diff.top1_agreement(), 0.0);
        diff.add(&p, &p);
        assert_eq!(diff.quantile(0.0), same.mean().max(0.0));
        assert!((diff.quantile(1.0) - expected).abs() < 1e-12);
    }
}
