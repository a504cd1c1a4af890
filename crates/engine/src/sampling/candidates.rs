//! The tokens still in the running while the chain narrows them down, as llama.cpp's
//! `llama_token_data_array`.

use std::cmp::Ordering;

use super::SamplingError;

/// One token under consideration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
    /// Its probability, once a sampler has computed the softmax; 0 before.
    pub p: f32,
}

/// The candidate tokens, with whether they are known to be sorted by descending logit.
#[derive(Debug, Clone, Default)]
pub struct Candidates {
    items: Vec<Candidate>,
    sorted: bool,
}

/// Descending logit, then ascending id: a total order, so that sorting gives one answer
/// whatever the algorithm, and equal logits keep token order.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// A NaN or infinite logit means the forward pass went wrong: an error naming the token.
fn check_finite(logits: &[f32]) -> Result<(), SamplingError> {
    match logits.iter().enumerate().find(|(_, l)| !l.is_finite()) {
        Some((id, &value)) => Err(SamplingError::NonFiniteLogit {
            token: id as u32,
            value,
        }),
        None => Ok(()),
    }
}

impl Candidates {
    /// Every token of the vocabulary with the model's logit for it. A NaN or infinite logit
    /// means the forward pass went wrong: it is an error naming the token, never a pick.
    pub fn from_logits(logits: &[f32]) -> Result<Self, SamplingError> {
        let mut candidates = Candidates::default();
        candidates.fill(logits)?;
        Ok(candidates)
    }

    /// As [`Candidates::from_logits`], reusing this allocation.
    pub fn fill(&mut self, logits: &[f32]) -> Result<(), SamplingError> {
        check_finite(logits)?;
        self.items.clear();
        self.items
            .extend(logits.iter().enumerate().map(|(id, &logit)| Candidate {
                id: id as u32,
                logit,
                p: 0.0,
            }));
        self.sorted = false;
        Ok(())
    }

    /// What [`Candidates::fill`] then [`Candidates::keep_top`] give, without a candidate
    /// for every token: one pass over the logits that keeps a short sorted list. A chain that
    /// starts with top-k (llama.cpp's default) otherwise spends most of its time building and
    /// partitioning 150k candidates to keep 40.
    pub fn fill_top(&mut self, logits: &[f32], k: usize) -> Result<(), SamplingError> {
        check_finite(logits)?;
        self.fill_sorted(&plumb_model::top_k(logits, k))
    }

    /// What [`Candidates::fill_top`] gives, from the top logits already found (by the backend,
    /// [`plumb_model::Model::forward_top_k`]): (id, logit), largest first, ties lower id first.
    pub fn fill_sorted(&mut self, top: &[(u32, f32)]) -> Result<(), SamplingError> {
        if let Some(&(token, value)) = top.iter().find(|(_, l)| !l.is_finite()) {
            return Err(SamplingError::NonFiniteLogit { token, value });
        }
        self.items.clear();
        self.items.extend(
            top.iter()
                .map(|&(id, logit)| Candidate { id, logit, p: 0.0 }),
        );
        self.sorted = true;
        Ok(())
    }

    pub fn as_slice(&self) -> &[Candidate] {
        &self.items
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether the candidates are known to be in descending logit order.
    pub fn is_sorted(&self) -> bool {
        self.sorted
    }

    /// The candidates for a sampler that changes logits in a way that may reorder them.
    pub(crate) fn logits_mut(&mut self) -> &mut [Candidate] {
        self.sorted = false;
        &mut self.items
    }

    /// The candidates for a sampler that keeps their order (a positive scale, probabilities).
    pub(crate) fn items_mut(&mut self) -> &mut [Candidate] {
        &mut self.items
    }

    /// Sorts by descending logit.
    pub fn sort(&mut self) {
        if !self.sorted {
            self.items.sort_unstable_by(by_logit_desc);
            self.sorted = true;
        }
    }

    /// Keeps the `k` highest logits, sorted, without sorting the rest.
    pub fn keep_top(&mut self, k: usize) {
        let k = k.min(self.items.len());
        if !self.sorted && k > 0 && k < self.items.len() {
            self.items.select_nth_unstable_by(k - 1, by_logit_desc);
            self.items.truncate(k);
        }
        self.sort();
        self.items.truncate(k);
    }

    /// Keeps the first `n` candidates in their current order.
    pub fn truncate(&mut self, n: usize) {
        self.items.truncate(n);
    }

    /// Keeps the candidates `keep` accepts, in their current order.
    pub(crate) fn retain(&mut self, keep: impl FnMut(&Candidate) -> bool) {
        self.items.retain(keep);
    }

    /// Replaces the candidates with `items`, in that order.
    pub(crate) fn replace(&mut self, items: Vec<Candidate>, sorted: bool) {
        self.items = items;
        self.sorted = sorted;
    }

    /// The largest logit, if any.
    pub fn max_logit(&self) -> Option<f32> {
        if self.sorted {
            return self.items.first().map(|c| c.logit);
        }
        self.items.iter().map(|c| c.logit).reduce(f32::max)
    }

    /// Sets each `p` to the softmax of the logits (llama.cpp's `llama_sampler_softmax_impl`):
    /// exponentials relative to the largest logit, divided by their sum.
    pub fn softmax(&mut self) {
        let Some(max) = self.max_logit() else { return };
        let mut sum = 0.0f32;
        for c in &mut self.items {
            c.p = (c.logit - max).exp();
            sum += c.p;
        }
        for c in &mut self.items {
            c.p /= sum;
        }
    }
}
