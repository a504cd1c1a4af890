//! A batch of tokens for one forward pass, possibly from several sequences, and the logits it
//! returns.

use crate::backend::TokenPos;

/// Tokens to evaluate together. Each carries its sequence, its position in that sequence, and
/// whether its logits are wanted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    tokens: Vec<u32>,
    places: Vec<TokenPos>,
    want_logits: Vec<bool>,
}

/// Which positions of a run of tokens return logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    /// Only the last token: enough to pick the next one.
    Last,
    /// Every token, e.g. to score a text.
    All,
}

impl Batch {
    pub fn new() -> Self {
        Self::default()
    }

    /// A run of consecutive tokens of one sequence starting at position `start`.
    pub fn sequence(seq: usize, start: usize, tokens: &[u32], logits: LogitsFor) -> Self {
        let mut batch = Batch::new();
        for (i, &token) in tokens.iter().enumerate() {
            let want = logits == LogitsFor::All || i + 1 == tokens.len();
            batch.push(token, seq, start + i, want);
        }
        batch
    }

    pub fn push(&mut self, token: u32, seq: usize, pos: usize, want_logits: bool) {
        self.tokens.push(token);
        self.places.push(TokenPos { seq, pos });
        self.want_logits.push(want_logits);
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn places(&self) -> &[TokenPos] {
        &self.places
    }

    /// Indices of the tokens whose logits are wanted, in batch order.
    pub fn output_rows(&self) -> Vec<usize> {
        (0..self.len()).filter(|&i| self.want_logits[i]).collect()
    }
}

/// Logits for the tokens of a batch that asked for them.
#[derive(Debug, Clone, PartialEq)]
pub struct Logits {
    n_vocab: usize,
    /// The batch index of each row.
    batch_rows: Vec<usize>,
    values: Vec<f32>,
}

impl Logits {
    pub(crate) fn new(n_vocab: usize, batch_rows: Vec<usize>, values: Vec<f32>) -> Self {
        debug_assert_eq!(values.len(), n_vocab * batch_rows.len());
        Logits {
            n_vocab,
            batch_rows,
            values,
        }
    }

    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Rows returned.
    pub fn len(&self) -> usize {
        self.batch_rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batch_rows.is_empty()
    }

    /// Row `i` of the returned rows.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.n_vocab..(i + 1) * self.n_vocab]
    }

    /// The row for batch token `index`, if its logits were asked for.
    pub fn for_token(&self, index: usize) -> Option<&[f32]> {
        let i = self.batch_rows.iter().position(|&r| r == index)?;
        Some(self.row(i))
    }

    /// The last row: the next-token logits of a single-sequence batch.
    pub fn last(&self) -> Option<&[f32]> {
        self.len().checked_sub(1).map(|i| self.row(i))
    }

    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.values.chunks_exact(self.n_vocab)
    }
}

/// The index of the largest value (the first, on ties): greedy decoding's choice.
pub fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best
}

/// The largest logits of each row a batch asked for ([`crate::Model::forward_top_k`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TopLogits {
    /// The batch index of each row.
    batch_rows: Vec<usize>,
    rows: Vec<Vec<(u32, f32)>>,
}

impl TopLogits {
    pub(crate) fn new(batch_rows: Vec<usize>, rows: Vec<Vec<(u32, f32)>>) -> Self {
        debug_assert_eq!(batch_rows.len(), rows.len());
        TopLogits { batch_rows, rows }
    }

    /// Rows returned.
    pub fn len(&self) -> usize {
        self.batch_rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.batch_rows.is_empty()
    }

    /// Row `i` of the returned rows: (token id, logit), largest first, ties lower id first.
    pub fn row(&self, i: usize) -> &[(u32, f32)] {
        &self.rows[i]
    }
}

/// The `k` largest values, largest first (ties: the lower index first), as (index, value).
/// NaN counts as smaller than every number. A small `k` (a sampler's top-k) takes one pass
/// that keeps a short sorted list, instead of a candidate for every one of 150k values.
pub fn top_k(values: &[f32], k: usize) -> Vec<(u32, f32)> {
    let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
    let k = k.min(values.len());
    if k == 0 {
        return Vec::new();
    }
    if k <= SHORT_LIST {
        let mut best: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
        for (i, &v) in values.iter().enumerate() {
            let v_key = key(v);
            // An equal value later in the row ranks below: lower indices first.
            if best.len() == k && key(best[k - 1].1).total_cmp(&v_key).is_ge() {
                continue;
            }
            let at = best.partition_point(|&(_, b)| key(b).total_cmp(&v_key).is_ge());
            best.insert(at, (i as u32, v));
            best.truncate(k);
        }
        return best;
    }
    let order = |a: &(u32, f32), b: &(u32, f32)| key(b.1).total_cmp(&key(a.1)).then(a.0.cmp(&b.0));
    let mut best: Vec<(u32, f32)> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| (i as u32, v))
        .collect();
    if k < best.len() {
        best.select_nth_unstable_by(k - 1, order);
    }
    best.truncate(k);
    best.sort_unstable_by(order);
    best
}

/// Up to this `k`, [`top_k`] keeps a sorted list in one pass.
const SHORT_LIST: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole row sorted by the rule, cut to `k`: what both of top_k's paths must give.
    fn sorted_prefix(values: &[f32], k: usize) -> Vec<(u32, f32)> {
        let key = |v: f32| if v.is_nan() { f32::NEG_INFINITY } else { v };
        let mut all: Vec<(u32, f32)> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as u32, v))
            .collect();
        all.sort_by(|a, b| key(b.1).total_cmp(&key(a.1)).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    #[test]
    fn top_k_orders_by_value_then_index_with_nan_lowest() {
        // Few distinct values, so that ties cross every cut; NaNs and infinities mixed in.
        let mut values: Vec<f32> = (0..3000u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 20) % 17) as f32 - 8.0)
            .collect();
        values[7] = f32::NAN;
        values[11] = f32::NEG_INFINITY;
        values[2999] = f32::INFINITY;
        for k in [
            0,
            1,
            2,
            40,
            SHORT_LIST,
            SHORT_LIST + 1,
            1000,
            2999,
            3000,
            5000,
        ] {
            let (got, want) = (top_k(&values, k), sorted_prefix(&values, k));
            let bits =
                |v: &[(u32, f32)]| v.iter().map(|&(i, x)| (i, x.to_bits())).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "k = {k}");
        }
        assert_eq!(top_k(&[], 3), vec![]);
    }
}
