//! One layer group's pool of KV blocks: reference counts, and the prefix cache's registry.
//!
//! A block is free, or held by one or more sequences (its reference count). A full block can
//! also be registered under the hash of the tokens it holds (and all before them), so that a
//! later sequence with the same prefix takes it instead of computing it again. When its last
//! holder lets go, a registered block is not forgotten: it waits in a queue of evictable
//! blocks, oldest freed first, and is reused for other contents only when no unregistered
//! block is free. This is vLLM's automatic prefix caching.

use std::collections::{BTreeMap, HashMap};

/// A block's index in its pool: slots `block * block_size ..` of every layer of the group.
pub(crate) type BlockId = u32;

/// A table entry for positions whose block a sliding window no longer needs.
pub(crate) const NO_BLOCK: BlockId = BlockId::MAX;

#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Holders of each block.
    refs: Vec<u32>,
    /// The hash each registered block is found under.
    hash: Vec<Option<u128>>,
    /// Where each evictable block waits in `evictable`.
    freed_at: Vec<Option<u64>>,
    /// Free blocks without a hash, taken first.
    free: Vec<BlockId>,
    /// Free blocks with a hash, by when they were freed.
    evictable: BTreeMap<u64, BlockId>,
    registry: HashMap<u128, BlockId>,
    /// Counts releases, to order `evictable`.
    clock: u64,
}

impl BlockPool {
    pub fn new(n_blocks: usize) -> Self {
        let n = BlockId::try_from(n_blocks)
            .ok()
            .filter(|&n| n != NO_BLOCK)
            .expect("Model::new_kv_cache refuses pools of 2³² − 1 blocks or more");
        BlockPool {
            refs: vec![0; n as usize],
            hash: vec![None; n as usize],
            freed_at: vec![None; n as usize],
            // Popped from the end: block 0 first.
            free: (0..n).rev().collect(),
            evictable: BTreeMap::new(),
            registry: HashMap::new(),
            clock: 0,
        }
    }

    pub fn total(&self) -> usize {
        self.refs.len()
    }

    /// Blocks an allocation can take: the free and the evictable.
    pub fn available(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    pub fn used(&self) -> usize {
        self.total() - self.available()
    }

    pub fn refs(&self, block: BlockId) -> u32 {
        self.refs[block as usize]
    }

    /// A block for new contents, with one reference: an unregistered free block, else the
    /// longest-evictable registered one, which is forgotten. `None` when every block is held.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let block = match self.free.pop() {
            Some(block) => block,
            None => {
                let (_, block) = self.evictable.pop_first()?;
                self.freed_at[block as usize] = None;
                self.unregister(block);
                block
            }
        };
        self.refs[block as usize] = 1;
        Some(block)
    }

    /// One more holder of `block`, which is held or registered.
    pub fn retain(&mut self, block: BlockId) {
        let b = block as usize;
        if let Some(at) = self.freed_at[b].take() {
            self.evictable.remove(&at);
        }
        self.refs[b] += 1;
    }

    /// One holder fewer; the last one leaves the block evictable if registered, else free.
    pub fn release(&mut self, block: BlockId) {
        let b = block as usize;
        self.refs[b] -= 1;
        if self.refs[b] > 0 {
            return;
        }
        if self.hash[b].is_some() {
            self.clock += 1;
            self.freed_at[b] = Some(self.clock);
            self.evictable.insert(self.clock, block);
        } else {
            self.free.push(block);
        }
    }

    /// The registered block holding the prefix whose last block hashes to `hash`.
    pub fn lookup(&self, hash: u128) -> Option<BlockId> {
        self.registry.get(&hash).copied()
    }

    #[cfg(test)]
    pub fn is_registered(&self, block: BlockId) -> bool {
        self.hash[block as usize].is_some()
    }

    /// Registers a held, full block under `hash`, unless the hash already has a block (two
    /// sequences computed the same prefix at once: the first one found serves later hits).
    pub fn register(&mut self, block: BlockId, hash: u128) {
        let b = block as usize;
        if self.hash[b].is_none() && !self.registry.contains_key(&hash) {
            self.hash[b] = Some(hash);
            self.registry.insert(hash, block);
        }
    }

    /// Forgets a block's hash, before its contents change. A free block becomes plain free.
    pub fn unregister(&mut self, block: BlockId) {
        let b = block as usize;
        if let Some(hash) = self.hash[b].take() {
            self.registry.remove(&hash);
            if let Some(at) = self.freed_at[b].take() {
                self.evictable.remove(&at);
                self.free.push(block);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_count_holders_and_the_last_release_frees() {
        let mut pool = BlockPool::new(3);
        let a = pool.allocate().unwrap();
        assert_eq!((a, pool.used(), pool.available()), (0, 1, 2));
        pool.retain(a);
        assert_eq!(pool.refs(a), 2);
        pool.release(a);
        assert_eq!((pool.refs(a), pool.used()), (1, 1));
        pool.release(a);
        assert_eq!((pool.refs(a), pool.used(), pool.available()), (0, 0, 3));
    }

    #[test]
    fn exhaustion_is_none_not_a_panic() {
        let mut pool = BlockPool::new(2);
        let held = [pool.allocate().unwrap(), pool.allocate().unwrap()];
        assert_eq!(pool.allocate(), None);
        pool.release(held[1]);
        assert_eq!(pool.allocate(), Some(held[1]));
        assert_eq!(BlockPool::new(0).allocate(), None);
    }

    #[test]
    fn registered_blocks_outlive_their_holders_until_evicted_oldest_first() {
        let mut pool = BlockPool::new(4);
        let blocks: Vec<_> = (0..4).map(|_| pool.allocate().unwrap()).collect();
        for (i, &b) in blocks.iter().take(3).enumerate() {
            pool.register(b, 100 + i as u128);
        }
        // Freed in the order 2, 0, 1, then the unregistered 3.
        for i in [2, 0, 1, 3] {
            pool.release(blocks[i]);
        }
        assert_eq!((pool.available(), pool.used()), (4, 0));
        for (i, &b) in blocks.iter().take(3).enumerate() {
            assert_eq!(pool.lookup(100 + i as u128), Some(b));
        }
        // A hit takes block 0 back out of the queue.
        pool.retain(blocks[0]);
        assert_eq!(pool.available(), 3);
        // The unregistered block goes first, then the oldest freed: 2, then 1.
        assert_eq!(pool.allocate(), Some(blocks[3]));
        assert_eq!(pool.allocate(), Some(blocks[2]));
        assert_eq!(pool.lookup(102), None);
        assert_eq!(pool.lookup(101), Some(blocks[1]));
        assert_eq!(pool.allocate(), Some(blocks[1]));
        assert_eq!(pool.lookup(101), None);
        assert_eq!(pool.allocate(), None);
        assert_eq!(pool.lookup(100), Some(blocks[0]));
    }

    #[test]
    fn a_hash_keeps_its_first_block_and_unregistering_frees_an_evictable_block() {
        let mut pool = BlockPool::new(2);
        let (a, b) = (pool.allocate().unwrap(), pool.allocate().unwrap());
        pool.register(a, 7);
        pool.register(b, 7);
        assert_eq!(pool.lookup(7), Some(a));
        assert!(!pool.is_registered(b));
        pool.release(a);
        pool.unregister(a);
        assert_eq!(pool.lookup(7), None);
        assert_eq!(pool.available(), 1);
        assert_eq!(pool.allocate(), Some(a));
    }
}
