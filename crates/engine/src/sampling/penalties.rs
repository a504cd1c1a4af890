//! Repetition, frequency and presence penalties over the last tokens (llama.cpp's
//! `penalties` sampler). The history holds the prompt as well as the generated tokens.

use std::collections::{HashMap, VecDeque};

use super::Candidates;

#[derive(Debug, Clone)]
pub struct Penalties {
    last_n: usize,
    repeat: f32,
    frequency: f32,
    presence: f32,
    history: VecDeque<u32>,
    counts: HashMap<u32, u32>,
}

impl Penalties {
    /// Penalties over the last `last_n` tokens (0 turns them off). `repeat` divides a
    /// positive logit of a token seen there (multiplies a negative one); `frequency` is
    /// subtracted once per occurrence, `presence` once per token seen.
    pub fn new(last_n: usize, repeat: f32, frequency: f32, presence: f32) -> Self {
        Penalties {
            last_n,
            repeat,
            frequency,
            presence,
            history: VecDeque::with_capacity(last_n),
            counts: HashMap::new(),
        }
    }

    /// Whether the settings change anything at all.
    pub(crate) fn is_active(&self) -> bool {
        self.last_n > 0 && (self.repeat != 1.0 || self.frequency != 0.0 || self.presence != 0.0)
    }

    /// Adds a token to the history, forgetting the oldest beyond `last_n`.
    pub fn accept(&mut self, token: u32) {
        if self.last_n == 0 {
            return;
        }
        if self.history.len() == self.last_n {
            if let Some(old) = self.history.pop_front() {
                if let Some(count) = self.counts.get_mut(&old) {
                    *count -= 1;
                    if *count == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.history.push_back(token);
        *self.counts.entry(token).or_insert(0) += 1;
    }

    pub fn reset(&mut self) {
        self.history.clear();
        self.counts.clear();
    }

    pub fn apply(&self, candidates: &mut Candidates) {
        if !self.is_active() || self.counts.is_empty() {
            return;
        }
        for c in candidates.logits_mut() {
            let Some(&count) = self.counts.get(&c.id) else {
                continue;
            };
            // Dividing a negative logit would make the token more likely, so llama.cpp
            // multiplies those instead.
            if c.logit <= 0.0 {
                c.logit *= self.repeat;
            } else {
                c.logit /= self.repeat;
            }
            c.logit -= count as f32 * self.frequency + self.presence;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalizes_the_window_only() {
        let mut penalties = Penalties::new(2, 2.0, 0.5, 0.25);
        for token in [0, 1, 1] {
            penalties.accept(token);
        }
        // Token 0 has left the window of 2; token 1 is in it twice.
        let mut c = Candidates::from_logits(&[4.0, 4.0, -4.0]).unwrap();
        penalties.apply(&mut c);
        let logits: Vec<f32> = c.as_slice().iter().map(|c| c.logit).collect();
        assert_eq!(logits, [4.0, 4.0 / 2.0 - 2.0 * 0.5 - 0.25, -4.0]);

        penalties.accept(2);
        let mut c = Candidates::from_logits(&[4.0, 4.0, -4.0]).unwrap();
        penalties.apply(&mut c);
        assert_eq!(c.as_slice()[2].logit, -4.0 * 2.0 - 0.5 - 0.25);

        penalties.reset();
        let mut c = Candidates::from_logits(&[4.0, 4.0, -4.0]).unwrap();
        penalties.apply(&mut c);
        assert_eq!(c.as_slice()[1].logit, 4.0);
    }
}
