//! The prefix cache's hash chain: a full block is known by a hash of its tokens and of its
//! parent's hash, so that equal hashes mean equal whole prefixes, not just equal blocks.
//!
//! The hash is 128 bits: the outputs of the standard library's keyed hasher under two
//! different keys (`RandomState`, whose keys are random per thread and differ from one
//! `RandomState` to the next). Taken as a keyed pseudorandom function, that makes a collision
//! among even 2³² cached blocks about 2⁻⁶⁴ likely, so a hit is trusted without comparing
//! tokens. Hashes never leave the cache that made them.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

#[derive(Debug)]
pub(crate) struct PrefixHasher {
    keys: [RandomState; 2],
}

impl PrefixHasher {
    pub fn new() -> Self {
        PrefixHasher {
            keys: [RandomState::new(), RandomState::new()],
        }
    }

    /// The hash of a block holding `tokens` after the block hashed `parent` (`None` for the
    /// first block of a sequence).
    pub fn block(&self, parent: Option<u128>, tokens: &[u32]) -> u128 {
        let [a, b] = &self.keys;
        let (hi, lo) = (a.hash_one((parent, tokens)), b.hash_one((parent, tokens)));
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// The chain of hashes of the whole blocks of `tokens`.
    pub fn chain(&self, tokens: &[u32], block_size: usize) -> Vec<u128> {
        let mut parent = None;
        tokens
            .chunks_exact(block_size)
            .map(|block| {
                let hash = self.block(parent, block);
                parent = Some(hash);
                hash
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_hash_depends_on_everything_before_it() {
        let h = PrefixHasher::new();
        let a = h.chain(&[1, 2, 3, 4, 5, 6, 7], 2);
        assert_eq!(a.len(), 3);
        assert_eq!(a, h.chain(&[1, 2, 3, 4, 5, 6], 2));
        // The same third block after a different first one hashes differently.
        let b = h.chain(&[9, 2, 3, 4, 5, 6], 2);
        assert_ne!(a[0], b[0]);
        assert_ne!(a[2], b[2]);
        assert_eq!(a[1], h.block(Some(a[0]), &[3, 4]));
        assert_ne!(h.block(None, &[3, 4]), a[1]);
    }
}
