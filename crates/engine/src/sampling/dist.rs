//! The final draw: one token at random, in proportion to the softmax of what is left
//! (llama.cpp's `dist` sampler).

use super::{Candidates, Mt19937, SamplingError};

/// Sets the candidates' probabilities and returns the index of the one drawn: the first
/// whose running sum of probabilities reaches a uniform fraction of the total, as llama.cpp
/// draws.
pub fn draw(candidates: &mut Candidates, rng: &mut Mt19937) -> Result<usize, SamplingError> {
    match candidates.len() {
        0 => return Err(SamplingError::NoCandidates),
        1 => {
            candidates.items_mut()[0].p = 1.0;
            return Ok(0);
        }
        _ => {}
    }
    let max = candidates.max_logit().unwrap_or(f32::NEG_INFINITY);
    if max == f32::NEG_INFINITY {
        return Err(SamplingError::NoCandidates);
    }
    let mut total = 0.0f64;
    for c in candidates.items_mut() {
        c.p = (c.logit - max).exp();
        total += f64::from(c.p);
    }
    let target = total * rng.next_f64();
    let mut running = 0.0f64;
    let mut chosen = None;
    let mut last_possible = 0;
    for (i, c) in candidates.items_mut().iter_mut().enumerate() {
        // A token of probability 0 is never drawn, even when the uniform draw is exactly 0.
        if c.p > 0.0 {
            last_possible = i;
            if chosen.is_none() {
                running += f64::from(c.p);
                if running >= target {
                    chosen = Some(i);
                }
            }
        }
        c.p = (f64::from(c.p) / total) as f32;
    }
    // Rounding can leave the running sum a hair below the target.
    Ok(chosen.unwrap_or(last_possible))
}
