//! The random numbers behind the final draw: the 32-bit Mersenne Twister (`std::mt19937`) and
//! libstdc++'s `uniform_real_distribution<double>(0, 1)` on it, as llama.cpp's `dist` sampler
//! uses them. The same seed gives the same numbers on every platform, and the same numbers as
//! a llama.cpp built with libstdc++.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// A seed from the process's random hash keys and the clock, for a user who gave none. Never
/// 0xFFFFFFFF, which means "random" to llama.cpp: a printed seed stays reusable there.
pub fn random_seed() -> u32 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() as u32).min(0xFFFF_FFFE)
}

/// `std::mt19937`.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Mt19937 {
    pub fn new(seed: u32) -> Self {
        let mut state = [0u32; N];
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: N }
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    fn twist(&mut self) {
        for i in 0..N {
            let y = (self.state[i] & UPPER_MASK) | (self.state[(i + 1) % N] & LOWER_MASK);
            let mut next = self.state[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                next ^= MATRIX_A;
            }
            self.state[i] = next;
        }
        self.index = 0;
    }

    /// A uniform double in `[0, 1)`: libstdc++'s `generate_canonical<double, 53>`, which
    /// takes two 32-bit draws, the first as the low half.
    pub fn next_f64(&mut self) -> f64 {
        const RANGE: f64 = 4_294_967_296.0;
        let low = f64::from(self.next_u32());
        let high = f64::from(self.next_u32());
        let value = (low + high * RANGE) / (RANGE * RANGE);
        if value >= 1.0 {
            // The sum can round up to 2⁶⁴; libstdc++ then returns the largest double below 1.
            1.0 - f64::EPSILON / 2.0
        } else {
            value
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_mersenne_twister() {
        // The C++ standard requires the 10000th output of a default-constructed mt19937
        // (seed 5489) to be 4123659995.
        let mut rng = Mt19937::new(5489);
        let value = (0..10_000).map(|_| rng.next_u32()).last();
        assert_eq!(value, Some(4_123_659_995));
        // The first outputs for seed 5489, from the reference implementation.
        let mut rng = Mt19937::new(5489);
        assert_eq!(rng.next_u32(), 3_499_211_612);
        assert_eq!(rng.next_u32(), 581_869_302);
    }

    #[test]
    fn doubles_combine_two_draws_low_half_first() {
        let mut bits = Mt19937::new(42);
        let (low, high) = (bits.next_u32(), bits.next_u32());
        let expected = (f64::from(low) + f64::from(high) * 4294967296.0) / 18446744073709551616.0;
        let mut rng = Mt19937::new(42);
        let value = rng.next_f64();
        assert_eq!(value, expected);
        assert!((0.0..1.0).contains(&value));
    }
}
