//! Which blocks hold which positions of which sequence: per layer group, a block table for
//! each sequence over the group's [`BlockPool`], and the tokens each sequence holds, whose
//! whole blocks are registered in the prefix cache.
//!
//! The invariants every operation keeps:
//! - a sequence holding `len` positions has `⌈len / block_size⌉` table entries in every group;
//! - a windowed group's entries for blocks no later token can see are [`NO_BLOCK`], and all
//!   others hold a block;
//! - the block the sequence's next position goes to (when `len` is not a multiple of the block
//!   size) is held by this sequence alone and not registered, so a pass may write it. Shared
//!   and registered blocks are only read.

use std::collections::BTreeMap;

use super::block_pool::{BlockId, BlockPool, NO_BLOCK};
use super::prefix_hash::PrefixHasher;
use super::{BlockCopy, BlockTables, KvGroup};
use crate::backend::TokenPos;
use crate::{ModelError, Result};

#[derive(Debug)]
pub(crate) struct Paging {
    block_size: usize,
    groups: Vec<Group>,
    seqs: Vec<SeqTokens>,
    hasher: PrefixHasher,
    /// Block copies that `fork` and `truncate` asked for, to make before the next pass
    /// writes anything.
    copies: Vec<BlockCopy>,
}

#[derive(Debug)]
struct Group {
    window: Option<usize>,
    pool: BlockPool,
    /// Per sequence, the block of each run of `block_size` positions.
    tables: Vec<Vec<BlockId>>,
}

/// The tokens a sequence holds and the hash of each of its whole blocks.
#[derive(Debug, Default, Clone)]
struct SeqTokens {
    tokens: Vec<u32>,
    hashes: Vec<u128>,
}

impl Group {
    /// Names the group's pool in messages.
    fn name(&self) -> String {
        match self.window {
            Some(w) => format!("the layers with a sliding window of {w}"),
            None => "the layers without a sliding window".to_owned(),
        }
    }

    fn exhausted(&self, needed: usize) -> ModelError {
        ModelError::KvPoolExhausted {
            pool: self.name(),
            needed,
            free: self.pool.available(),
            total: self.pool.total(),
        }
    }
}

impl Paging {
    pub fn new(block_size: usize, groups: &[KvGroup], n_seq: usize) -> Self {
        Paging {
            block_size,
            groups: groups
                .iter()
                .map(|g| Group {
                    window: g.window,
                    pool: BlockPool::new(g.n_blocks),
                    tables: vec![Vec::new(); n_seq],
                })
                .collect(),
            seqs: vec![SeqTokens::default(); n_seq],
            hasher: PrefixHasher::new(),
            copies: Vec::new(),
        }
    }

    pub fn len(&self, seq: usize) -> usize {
        self.tokens(seq).len()
    }

    /// The tokens sequence `seq` holds, in order (none for an unknown sequence).
    pub fn tokens(&self, seq: usize) -> &[u32] {
        self.seqs.get(seq).map_or(&[], |s| &s.tokens)
    }

    /// Per sequence id, its block table in group `group`.
    pub fn tables(&self, group: usize) -> &[Vec<BlockId>] {
        &self.groups[group].tables
    }

    pub fn pending_copies(&self) -> &[BlockCopy] {
        &self.copies
    }

    pub fn copies_done(&mut self) {
        self.copies.clear();
    }

    /// The first block a token at position `pos` or later can see.
    fn first_needed(&self, window: Option<usize>, pos: usize) -> usize {
        window.map_or(0, |w| (pos + 1).saturating_sub(w) / self.block_size)
    }

    /// The groups whose pools can run out: a windowed group is sized for the most its
    /// sequences can ever hold at once, so only the unwindowed ones count for admission.
    fn counted(&self) -> impl Iterator<Item = &Group> {
        self.groups.iter().filter(|g| g.window.is_none())
    }

    pub fn free_blocks(&self) -> usize {
        self.counted().map(|g| g.pool.available()).sum()
    }

    pub fn used_blocks(&self) -> usize {
        self.counted().map(|g| g.pool.used()).sum()
    }

    pub fn total_blocks(&self) -> usize {
        self.counted().map(|g| g.pool.total()).sum()
    }

    pub fn blocks_needed(&self, n_tokens: usize) -> usize {
        self.counted().count() * n_tokens.div_ceil(self.block_size)
    }

    /// Gives every sequence of a checked batch the blocks its new positions go to, or, when a
    /// pool has too few, fails and changes nothing.
    pub fn grow(&mut self, places: &[TokenPos]) -> Result<()> {
        let mut ends = BTreeMap::new();
        for p in places {
            ends.insert(p.seq, p.pos + 1);
        }
        let bs = self.block_size;
        for group in &self.groups {
            let needed: usize = ends
                .iter()
                .map(|(&seq, &end)| end.div_ceil(bs).saturating_sub(group.tables[seq].len()))
                .sum();
            if needed > group.pool.available() {
                return Err(group.exhausted(needed));
            }
        }
        for group in &mut self.groups {
            for (&seq, &end) in &ends {
                while group.tables[seq].len() < end.div_ceil(bs) {
                    let block = group.pool.allocate().expect("counted above");
                    group.tables[seq].push(block);
                }
            }
        }
        Ok(())
    }

    /// The slot each token of a grown batch writes in group `group`.
    pub fn slots(&self, group: usize, places: &[TokenPos]) -> Vec<usize> {
        let tables = BlockTables::new(self.block_size, &[], &self.groups[group].tables);
        places
            .iter()
            .map(|p| tables.of(p.seq).slot(p.pos))
            .collect()
    }

    /// Records a batch that has been written: its tokens, the hashes of the blocks it filled
    /// (registered for later prefixes), and the window blocks no later token sees (released).
    pub fn written(&mut self, tokens: &[u32], places: &[TokenPos]) {
        let mut touched = vec![false; self.seqs.len()];
        for (&token, place) in tokens.iter().zip(places) {
            self.seqs[place.seq].tokens.push(token);
            touched[place.seq] = true;
        }
        for seq in (0..self.seqs.len()).filter(|&s| touched[s]) {
            self.register_full_blocks(seq);
            self.release_unseen(seq);
        }
    }

    /// Undoes [`Paging::grow`] after a pass failed: blocks past each sequence's positions go.
    pub fn abandon(&mut self) {
        for seq in 0..self.seqs.len() {
            self.release_tail(seq);
        }
    }

    fn register_full_blocks(&mut self, seq: usize) {
        let bs = self.block_size;
        let s = &mut self.seqs[seq];
        while (s.hashes.len() + 1) * bs <= s.tokens.len() {
            let k = s.hashes.len();
            let hash = self
                .hasher
                .block(s.hashes.last().copied(), &s.tokens[k * bs..(k + 1) * bs]);
            s.hashes.push(hash);
            for group in &mut self.groups {
                let block = group.tables[seq][k];
                if block != NO_BLOCK {
                    group.pool.register(block, hash);
                }
            }
        }
    }

    /// Releases a windowed group's blocks that lie wholly before the window of the
    /// sequence's next position.
    fn release_unseen(&mut self, seq: usize) {
        let len = self.len(seq);
        for g in 0..self.groups.len() {
            let first = self.first_needed(self.groups[g].window, len);
            let group = &mut self.groups[g];
            let end = first.min(group.tables[seq].len());
            for entry in &mut group.tables[seq][..end] {
                if *entry != NO_BLOCK {
                    group.pool.release(*entry);
                    *entry = NO_BLOCK;
                }
            }
        }
    }

    /// Releases the table entries past the sequence's positions.
    fn release_tail(&mut self, seq: usize) {
        let keep = self.len(seq).div_ceil(self.block_size);
        for group in &mut self.groups {
            while group.tables[seq].len() > keep {
                if let Some(block) = group.tables[seq].pop().filter(|&b| b != NO_BLOCK) {
                    group.pool.release(block);
                }
            }
        }
    }

    /// Forgets a sequence. Its last blocks are released first, so that the prefix cache
    /// evicts a prefix's tail before its head.
    pub fn clear(&mut self, seq: usize) {
        let Some(s) = self.seqs.get_mut(seq) else {
            return;
        };
        *s = SeqTokens::default();
        self.release_tail(seq);
    }

    /// Cuts sequence `seq` back to `len` positions (see [`super::KvCache::truncate`]); the
    /// error is the reason it cannot, and then nothing changed.
    pub fn truncate(&mut self, seq: usize, len: usize) -> Result<(), String> {
        let held = self.len(seq);
        if len > held {
            return Err(format!("it holds only {held} positions"));
        }
        let bs = self.block_size;
        let keep = len.div_ceil(bs);
        let partial = !len.is_multiple_of(bs);
        // A window's blocks that were released come back from the prefix cache if they are
        // still there. The block the next position goes to may need a private copy.
        let mut plans = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            let first = self.first_needed(group.window, len);
            let mut back = Vec::new();
            for k in first..keep {
                if group.tables[seq][k] != NO_BLOCK {
                    continue;
                }
                let block = self.seqs[seq]
                    .hashes
                    .get(k)
                    .and_then(|&h| group.pool.lookup(h))
                    .ok_or_else(|| {
                        format!(
                            "{} no longer hold positions {}..{}",
                            group.name(),
                            k * bs,
                            (k + 1) * bs
                        )
                    })?;
                back.push((k, block));
            }
            let copy = partial && {
                let k = keep - 1;
                let (block, ours) = match back.iter().find(|(j, _)| *j == k) {
                    Some(&(_, block)) => (block, 0),
                    None => (group.tables[seq][k], 1),
                };
                group.pool.refs(block) > ours
            };
            let from_free = back.iter().filter(|(_, b)| group.pool.refs(*b) == 0);
            if copy && group.pool.available() <= from_free.count() {
                return Err(format!(
                    "the block pool of {} is exhausted: a shared block needs a copy",
                    group.name()
                ));
            }
            plans.push((back, copy));
        }

        self.seqs[seq].tokens.truncate(len);
        self.seqs[seq].hashes.truncate(len / bs);
        self.release_tail(seq);
        for (g, (back, copy)) in plans.into_iter().enumerate() {
            let group = &mut self.groups[g];
            for (k, block) in back {
                group.pool.retain(block);
                group.tables[seq][k] = block;
            }
            if !partial {
                continue;
            }
            let block = group.tables[seq][keep - 1];
            if copy {
                let fresh = group.pool.allocate().expect("checked above");
                self.copies.push(BlockCopy {
                    group: g,
                    src: block as usize * bs,
                    dst: fresh as usize * bs,
                    len: bs,
                });
                group.pool.release(block);
                group.tables[seq][keep - 1] = fresh;
            } else {
                group.pool.unregister(block);
            }
        }
        Ok(())
    }

    /// Makes `dst` (empty) a copy of `src`: whole blocks shared, the partial last block
    /// copied. The error is the reason it cannot, and then nothing changed.
    pub fn fork(&mut self, src: usize, dst: usize) -> Result<(), String> {
        let n_seq = self.seqs.len();
        if src >= n_seq || dst >= n_seq {
            return Err(format!("the cache holds sequences 0..{n_seq}"));
        }
        if src == dst {
            return Err("a sequence cannot be forked onto itself".to_owned());
        }
        if !self.seqs[dst].tokens.is_empty() {
            return Err(format!("sequence {dst} is not empty; clear it first"));
        }
        let bs = self.block_size;
        let len = self.len(src);
        let partial = !len.is_multiple_of(bs);
        if let Some(group) = self
            .groups
            .iter()
            .find(|g| partial && g.pool.available() == 0)
        {
            return Err(format!(
                "the block pool of {} is exhausted: the last, partial block needs a copy",
                group.name()
            ));
        }
        for (g, group) in self.groups.iter_mut().enumerate() {
            let mut table = group.tables[src].clone();
            for &block in table.iter().filter(|&&b| b != NO_BLOCK) {
                group.pool.retain(block);
            }
            if let (true, Some(last)) = (partial, table.last_mut()) {
                let fresh = group.pool.allocate().expect("checked above");
                self.copies.push(BlockCopy {
                    group: g,
                    src: *last as usize * bs,
                    dst: fresh as usize * bs,
                    len: bs,
                });
                group.pool.release(*last);
                *last = fresh;
            }
            group.tables[dst] = table;
        }
        self.seqs[dst] = self.seqs[src].clone();
        Ok(())
    }

    /// Attaches to the empty sequence `seq` the longest run of cached whole blocks that
    /// prefixes `tokens` and is shorter than it; returns its length in positions.
    pub fn reuse_prefix(&mut self, seq: usize, tokens: &[u32]) -> usize {
        if self.len(seq) != 0 || seq >= self.seqs.len() || tokens.is_empty() {
            return 0;
        }
        let bs = self.block_size;
        let hashes = self.hasher.chain(&tokens[..tokens.len() - 1], bs);
        let found: Vec<Vec<Option<BlockId>>> = self
            .groups
            .iter()
            .map(|g| hashes.iter().map(|&h| g.pool.lookup(h)).collect())
            .collect();
        // A run of k blocks serves if every group has the blocks a token at k·bs sees.
        let Some(k) = (1..=hashes.len()).rev().find(|&k| {
            self.groups.iter().zip(&found).all(|(group, found)| {
                let first = self.first_needed(group.window, k * bs);
                found[first..k].iter().all(Option::is_some)
            })
        }) else {
            return 0;
        };
        let firsts: Vec<usize> = (self.groups.iter())
            .map(|g| self.first_needed(g.window, k * bs))
            .collect();
        for ((group, found), first) in self.groups.iter_mut().zip(&found).zip(firsts) {
            let mut table = vec![NO_BLOCK; k];
            for (entry, &block) in table[first..].iter_mut().zip(&found[first..k]) {
                if let Some(block) = block {
                    group.pool.retain(block);
                    *entry = block;
                }
            }
            group.tables[seq] = table;
        }
        self.seqs[seq] = SeqTokens {
            tokens: tokens[..k * bs].to_vec(),
            hashes: hashes[..k].to_vec(),
        };
        k * bs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: usize = 4;

    fn paging(groups: &[(Option<usize>, usize)], n_seq: usize) -> Paging {
        let groups: Vec<KvGroup> = groups
            .iter()
            .map(|&(window, n_blocks)| KvGroup { window, n_blocks })
            .collect();
        Paging::new(BS, &groups, n_seq)
    }

    /// Runs a pass of `tokens` continuing `seq`, as `Model::forward` does.
    fn write(p: &mut Paging, seq: usize, tokens: &[u32]) -> Result<()> {
        let start = p.len(seq);
        let places: Vec<TokenPos> = (0..tokens.len())
            .map(|i| TokenPos {
                seq,
                pos: start + i,
            })
            .collect();
        p.grow(&places)?;
        p.written(tokens, &places);
        Ok(())
    }

    fn refs(p: &Paging, g: usize, seq: usize) -> Vec<u32> {
        p.groups[g].tables[seq]
            .iter()
            .map(|&b| {
                if b == NO_BLOCK {
                    0
                } else {
                    p.groups[g].pool.refs(b)
                }
            })
            .collect()
    }

    #[test]
    fn sequences_take_blocks_as_they_grow_and_give_them_back() {
        let mut p = paging(&[(None, 8)], 2);
        write(&mut p, 0, &[1, 2, 3, 4, 5]).unwrap();
        write(&mut p, 1, &[9]).unwrap();
        assert_eq!(
            (p.used_blocks(), p.free_blocks(), p.total_blocks()),
            (3, 5, 8)
        );
        assert_eq!(p.tables(0)[0], [0, 1]);
        assert_eq!(p.tables(0)[1], [2]);
        assert_eq!(p.slots(0, &[TokenPos { seq: 0, pos: 5 }]), [5]);
        assert_eq!(p.blocks_needed(9), 3);
        p.clear(0);
        assert_eq!((p.len(0), p.used_blocks(), p.free_blocks()), (0, 1, 7));
    }

    #[test]
    fn an_exhausted_pool_is_an_error_naming_it_and_changes_nothing() {
        let mut p = paging(&[(None, 3)], 2);
        write(&mut p, 0, &[1, 2, 3, 4, 5]).unwrap();
        let err = write(&mut p, 1, &[1, 2, 3, 4, 5]).unwrap_err().to_string();
        assert!(
            err.contains("without a sliding window") && err.contains("2 more"),
            "{err}"
        );
        assert_eq!((p.len(1), p.used_blocks()), (0, 2));
        assert!(p.tables(0)[1].is_empty());
        write(&mut p, 1, &[1, 2, 3, 4]).unwrap();
    }

    #[test]
    fn a_prefix_is_found_by_its_hash_chain_and_shared() {
        let mut p = paging(&[(None, 8)], 3);
        let prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        write(&mut p, 0, &prompt).unwrap();
        // Two whole blocks are cached; the last prompt token is always evaluated.
        assert_eq!(p.reuse_prefix(1, &prompt), 8);
        assert_eq!(p.tables(0)[1], p.tables(0)[0][..2]);
        assert_eq!(refs(&p, 0, 1), [2, 2]);
        assert_eq!(p.reuse_prefix(2, &prompt[..8]), 4);
        // Same second block after another first block: no hit.
        p.clear(2);
        assert_eq!(p.reuse_prefix(2, &[0, 2, 3, 4, 5, 6, 7, 8, 9]), 0);
        assert_eq!(p.reuse_prefix(2, &[1, 2, 3, 4, 5, 6, 7, 0, 9]), 4);
        // Not for a sequence that holds something.
        assert_eq!(p.reuse_prefix(0, &prompt), 0);
        // Freed blocks stay findable until something else needs them.
        p.clear(0);
        p.clear(1);
        p.clear(2);
        assert_eq!(p.used_blocks(), 0);
        assert_eq!(p.reuse_prefix(1, &prompt), 8);
        p.clear(1);
        write(&mut p, 0, &[50; 28]).unwrap();
        // Seven blocks taken: the six unregistered ones first, then the tail of the prefix,
        // released before its head.
        assert_eq!(p.reuse_prefix(1, &prompt), 4);
    }

    #[test]
    fn a_fork_shares_whole_blocks_and_copies_the_partial_one() {
        let mut p = paging(&[(None, 8)], 2);
        write(&mut p, 0, &[1, 2, 3, 4, 5, 6]).unwrap();
        p.fork(0, 1).unwrap();
        assert_eq!(p.len(1), 6);
        assert_eq!(p.tables(0)[1][0], p.tables(0)[0][0]);
        assert_ne!(p.tables(0)[1][1], p.tables(0)[0][1]);
        assert_eq!((refs(&p, 0, 0), refs(&p, 0, 1)), (vec![2, 1], vec![2, 1]));
        let (src, dst) = (p.tables(0)[0][1] as usize, p.tables(0)[1][1] as usize);
        assert_eq!(
            p.pending_copies(),
            [BlockCopy {
                group: 0,
                src: src * BS,
                dst: dst * BS,
                len: BS
            }]
        );
        assert!(p.fork(0, 1).unwrap_err().contains("not empty"));
        assert!(p.fork(0, 0).is_err() && p.fork(0, 5).is_err());
    }

    #[test]
    fn truncating_into_a_shared_block_copies_it_and_into_a_registered_one_unregisters_it() {
        let mut p = paging(&[(None, 8)], 2);
        write(&mut p, 0, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        p.fork(0, 1).unwrap();
        assert!(p.pending_copies().is_empty());
        let shared = p.tables(0)[1][1];
        p.truncate(1, 6).unwrap();
        let fresh = p.tables(0)[1][1];
        assert_ne!(fresh, shared);
        assert_eq!(p.pending_copies().len(), 1);
        assert_eq!(p.groups[0].pool.refs(shared), 1);
        // Sequence 0 alone holds its registered last block: cut into, it is forgotten.
        assert!(p.groups[0].pool.is_registered(shared));
        p.truncate(0, 7).unwrap();
        assert!(!p.groups[0].pool.is_registered(shared));
        assert_eq!(p.tables(0)[0][1], shared);
        assert!(p.truncate(0, 8).unwrap_err().contains("only 7"));
        p.truncate(0, 3).unwrap();
        assert_eq!((p.len(0), p.tables(0)[0].len()), (3, 1));
    }

    #[test]
    fn a_window_releases_blocks_it_no_longer_sees() {
        // Window 6: a token at position 13 sees 8..14, blocks 2 and 3.
        let mut p = paging(&[(None, 8), (Some(6), 4)], 1);
        let tokens: Vec<u32> = (0..13).collect();
        write(&mut p, 0, &tokens).unwrap();
        assert_eq!(refs(&p, 1, 0), [0, 0, 1, 1]);
        assert_eq!(p.tables(1)[0][..2], [NO_BLOCK, NO_BLOCK]);
        assert_eq!(refs(&p, 0, 0), [1, 1, 1, 1]);
        // Windowed pools are left out of the accounting.
        assert_eq!((p.used_blocks(), p.total_blocks()), (4, 8));
        // A prefix hit needs only the window's blocks.
        p.clear(0);
        assert_eq!(p.reuse_prefix(0, &tokens), 12);
        assert_eq!(refs(&p, 1, 0), [0, 1, 1]);
        assert_eq!(refs(&p, 0, 0), [1, 1, 1]);
        // Going back to 5 needs block 0 again: it is still cached, so it returns.
        p.truncate(0, 5).unwrap();
        assert_eq!(refs(&p, 1, 0), [1, 1]);
        // Once evicted, a released window block cannot come back.
        p.clear(0);
        write(&mut p, 0, &[7; 13]).unwrap();
        p.clear(0);
        // The plain group alone still holds blocks 0..3, but without the window's blocks
        // nothing is reused.
        assert_eq!(p.reuse_prefix(0, &tokens), 0);
    }
}
