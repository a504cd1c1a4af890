//! The KV cache: per layer, the keys and values of every position of several sequences, so that
//! each new token attends to its sequence's past without recomputing it.
//!
//! The storage belongs to the backend (host memory, device memory) and is flat: per layer, a
//! run of slots of one K row and one V row each. This module owns its shape ([`KvLayout`]) and
//! everything else, which every backend shares: which slots hold which positions, how many
//! positions each sequence holds, and whether a batch fits.
//!
//! Slots are handed out in blocks of `block_size` positions, as in vLLM's paged attention.
//! Layers with the same attention window form a group that shares one pool of blocks and one
//! block table per sequence; block `b` of a group is slots `b·block_size..(b+1)·block_size` of
//! each of its layers, and position `p` of a sequence lives in slot
//! `table[p / block_size] · block_size + p % block_size`. Sequences take blocks as they grow and
//! give them back when cleared or cut short; a sliding-window group gives back the blocks no
//! later token can see after each pass.
//!
//! Whole blocks are also a prefix cache: each is registered under a hash of the tokens up to
//! its end, and stays findable after its sequence lets go of it, until the pool needs it for
//! something else. [`KvCache::reuse_prefix`] starts a sequence on the blocks of an earlier one
//! that began with the same tokens, and [`KvCache::fork`] starts one as a copy of another; the
//! blocks they share are never written again.
//!
//! Each sequence's positions must arrive in order, from 0, without gaps.

mod block_pool;
mod paging;
mod prefix_hash;

use std::ops::Range;

use crate::backend::{Backend, TokenPos};
use crate::{ModelError, Result};
use block_pool::BlockId;
use paging::Paging;

/// How large a cache to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvConfig {
    /// Positions each sequence may hold.
    pub n_ctx: usize,
    /// Sequences: ids `0..n_seq`.
    pub n_seq: usize,
    /// The most tokens one forward pass may carry (all sequences together).
    pub max_batch: usize,
    /// Positions per block; a power of two, so that a slot is found with shifts.
    pub block_size: usize,
    /// Blocks in the pool of the layers without a sliding window. A windowed group gets
    /// what its `n_seq` sequences can hold at once at most, which it can then never exceed.
    pub n_blocks: usize,
}

impl KvConfig {
    /// vLLM's default: small enough to share prompts at a fine grain, large enough that a
    /// block table stays short.
    pub const DEFAULT_BLOCK_SIZE: usize = 16;

    /// A cache whose `n_seq` sequences can all hold `n_ctx` positions at once, in blocks of
    /// [`Self::DEFAULT_BLOCK_SIZE`].
    pub fn new(n_ctx: usize, n_seq: usize, max_batch: usize) -> Self {
        KvConfig {
            n_ctx,
            n_seq,
            max_batch,
            block_size: 0,
            n_blocks: 0,
        }
        .with_block_size(Self::DEFAULT_BLOCK_SIZE)
    }

    /// The same cache in blocks of `block_size`, its pool still sized for every sequence's
    /// whole context.
    pub fn with_block_size(self, block_size: usize) -> Self {
        KvConfig {
            block_size,
            n_blocks: self.n_seq * self.n_ctx.div_ceil(block_size.max(1)),
            ..self
        }
    }

    /// Blocks one sequence of a group with `window` can hold at once: all its positions, or
    /// the window of its oldest token of a full batch plus the batch, wherever blocks start.
    fn blocks_per_seq(&self, window: Option<usize>) -> usize {
        let all = self.n_ctx.div_ceil(self.block_size);
        match window {
            Some(w) => all.min((w - 1 + self.max_batch).div_ceil(self.block_size) + 1),
            None => all,
        }
    }
}

/// The shape of the whole cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    pub n_ctx: usize,
    pub n_seq: usize,
    pub max_batch: usize,
    pub block_size: usize,
    /// Layer groups, in order of their first layer.
    pub groups: Vec<KvGroup>,
    pub layers: Vec<LayerKv>,
}

/// Layers that share block tables and a pool: those with the same window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvGroup {
    pub window: Option<usize>,
    pub n_blocks: usize,
}

/// The shape of one layer's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerKv {
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Sliding window: a token sees itself and the `window − 1` positions before it.
    pub window: Option<usize>,
    /// The layer's group in [`KvLayout::groups`].
    pub group: usize,
    /// Slots in the layer's storage: its group's blocks times the block size.
    pub n_slots: usize,
}

impl LayerKv {
    /// A layer's shape, before [`KvLayout::new`] places it in a group.
    pub fn new(
        n_head_kv: usize,
        head_dim_k: usize,
        head_dim_v: usize,
        window: Option<usize>,
    ) -> Self {
        LayerKv {
            n_head_kv,
            head_dim_k,
            head_dim_v,
            window,
            group: 0,
            n_slots: 0,
        }
    }

    /// The positions a token at `pos` attends to.
    pub fn visible(&self, pos: usize) -> Range<usize> {
        let start = match self.window {
            Some(w) => (pos + 1).saturating_sub(w),
            None => 0,
        };
        start..pos + 1
    }

    /// Floats of one K row (all KV heads of one position).
    pub fn k_width(&self) -> usize {
        self.n_head_kv * self.head_dim_k
    }

    /// Floats of one V row.
    pub fn v_width(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }
}

impl KvLayout {
    /// The layout of a cache of `config` for `layers`: one group per distinct window, and
    /// each layer's group and slots filled in.
    pub fn new(config: &KvConfig, mut layers: Vec<LayerKv>) -> Self {
        let mut groups: Vec<KvGroup> = Vec::new();
        for layer in &mut layers {
            layer.group = match groups.iter().position(|g| g.window == layer.window) {
                Some(g) => g,
                None => {
                    let n_blocks = match layer.window {
                        Some(_) => config.n_seq * config.blocks_per_seq(layer.window),
                        None => config.n_blocks,
                    };
                    groups.push(KvGroup {
                        window: layer.window,
                        n_blocks,
                    });
                    groups.len() - 1
                }
            };
            layer.n_slots = groups[layer.group].n_blocks * config.block_size;
        }
        KvLayout {
            n_ctx: config.n_ctx,
            n_seq: config.n_seq,
            max_batch: config.max_batch,
            block_size: config.block_size,
            groups,
            layers,
        }
    }
}

/// A copy of `len` slots from `src` to `dst` in every layer of group `group`: a block that a
/// sequence must write but shares with another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCopy {
    pub group: usize,
    pub src: usize,
    pub dst: usize,
    pub len: usize,
}

/// Where one layer's keys and values go and come from in one pass.
#[derive(Debug, Clone, Copy)]
pub struct BlockTables<'a> {
    /// The slot each token of the batch writes its key and value to.
    pub slots: &'a [usize],
    /// Per sequence id, its block table.
    tables: &'a [Vec<BlockId>],
    shift: u32,
}

/// One sequence's block table: entry `i` holds positions `i·block_size..(i+1)·block_size`.
#[derive(Debug, Clone, Copy)]
pub struct BlockTable<'a> {
    pub blocks: &'a [u32],
    shift: u32,
}

impl<'a> BlockTables<'a> {
    /// `block_size` must be a power of two; `tables` are indexed by sequence id.
    pub fn new(block_size: usize, slots: &'a [usize], tables: &'a [Vec<u32>]) -> Self {
        debug_assert!(block_size.is_power_of_two());
        BlockTables {
            slots,
            tables,
            shift: block_size.trailing_zeros(),
        }
    }

    pub fn block_size(&self) -> usize {
        1 << self.shift
    }

    /// Sequence ids the tables cover.
    pub fn n_seq(&self) -> usize {
        self.tables.len()
    }

    /// The block table of sequence `seq` (empty for an unknown sequence).
    pub fn of(&self, seq: usize) -> BlockTable<'a> {
        BlockTable {
            blocks: self.tables.get(seq).map_or(&[], Vec::as_slice),
            shift: self.shift,
        }
    }
}

impl BlockTable<'_> {
    /// The slot that holds position `pos`, which the table must cover.
    #[inline(always)]
    pub fn slot(&self, pos: usize) -> usize {
        ((self.blocks[pos >> self.shift] as usize) << self.shift) | (pos & ((1 << self.shift) - 1))
    }
}

/// A KV cache for one model on one backend.
pub struct KvCache<B: Backend> {
    layout: KvLayout,
    paging: Paging,
    storage: B::KvStorage,
}

/// What a pass needs of the cache besides its storage: per layer, the slot each token of the
/// batch writes and the block tables it reads through.
pub struct PassKv<'a> {
    layout: &'a KvLayout,
    /// Per group, the slot each token writes.
    slots: Vec<Vec<usize>>,
    /// Per group, every sequence's block table.
    tables: Vec<&'a [Vec<BlockId>]>,
}

impl<'a> PassKv<'a> {
    /// A pass's KV inputs given outright, per group of `layout`: the slot each token writes
    /// and every sequence's block table. [`KvCache`] makes them for a model's passes; a
    /// backend's tests drive single ops with them.
    pub fn new(layout: &'a KvLayout, slots: Vec<Vec<usize>>, tables: Vec<&'a [Vec<u32>]>) -> Self {
        PassKv {
            layout,
            slots,
            tables,
        }
    }

    /// The block tables of layer `layer`'s group.
    pub fn layer(&self, layer: usize) -> BlockTables<'_> {
        self.group(self.layout.layers[layer].group)
    }

    /// The block tables of group `group` (see [`KvLayout::groups`]).
    pub fn group(&self, group: usize) -> BlockTables<'_> {
        BlockTables::new(
            self.layout.block_size,
            &self.slots[group],
            self.tables[group],
        )
    }

    /// The cache's layout: its layers, their groups and shapes.
    pub fn layout(&self) -> &KvLayout {
        self.layout
    }
}

impl<B: Backend> KvCache<B> {
    /// A cache of `layout` in `storage`, which the backend made for it
    /// ([`Backend::new_kv_storage`]). [`crate::Model::new_kv_cache`] makes one for a model;
    /// a backend's own tests make one for a layout of their choosing.
    pub fn new(layout: KvLayout, storage: B::KvStorage) -> Self {
        KvCache {
            paging: Paging::new(layout.block_size, &layout.groups, layout.n_seq),
            layout,
            storage,
        }
    }

    pub fn layout(&self) -> &KvLayout {
        &self.layout
    }

    pub fn n_ctx(&self) -> usize {
        self.layout.n_ctx
    }

    pub fn n_seq(&self) -> usize {
        self.layout.n_seq
    }

    pub fn block_size(&self) -> usize {
        self.layout.block_size
    }

    /// Positions sequence `seq` holds: the position its next token must have (0 for an
    /// unknown sequence).
    pub fn seq_len(&self, seq: usize) -> usize {
        self.paging.len(seq)
    }

    /// The tokens whose keys and values sequence `seq` holds, in order.
    pub fn seq_tokens(&self, seq: usize) -> &[u32] {
        self.paging.tokens(seq)
    }

    /// Forgets a sequence, so that it starts again at position 0. Its whole blocks stay in
    /// the prefix cache.
    pub fn clear_seq(&mut self, seq: usize) {
        self.paging.clear(seq);
    }

    /// Keeps only the first `len` positions of sequence `seq`, so that it continues at `len`:
    /// a prompt that shares a prefix with what the cache holds evaluates only the rest.
    ///
    /// A sliding-window layer gives back the blocks no later token could see. When a token at
    /// `len` needs one that has since left the prefix cache, or a shared block needs a copy
    /// and the pool has no block for it, this fails and changes nothing; clear the sequence
    /// and evaluate it again from the start.
    pub fn truncate(&mut self, seq: usize, len: usize) -> Result<()> {
        let reason = if seq >= self.layout.n_seq {
            format!("the cache holds sequences 0..{}", self.layout.n_seq)
        } else {
            match self.paging.truncate(seq, len) {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            }
        };
        Err(ModelError::Truncate { seq, len, reason })
    }

    /// Starts the empty sequence `seq` on cached blocks: the longest run of whole blocks that
    /// earlier sequences computed for a prefix of `tokens`, shorter than `tokens` (its last
    /// token must be evaluated for its logits). Returns the positions the sequence now holds,
    /// a multiple of the block size; evaluate `tokens` from there. Returns 0, attaching
    /// nothing, when `seq` is unknown or not empty.
    pub fn reuse_prefix(&mut self, seq: usize, tokens: &[u32]) -> usize {
        self.paging.reuse_prefix(seq, tokens)
    }

    /// Makes the empty sequence `dst` continue exactly as `src` would: it shares `src`'s whole
    /// blocks and gets a copy of its partial last block (made before the next pass).
    pub fn fork(&mut self, src: usize, dst: usize) -> Result<()> {
        self.paging
            .fork(src, dst)
            .map_err(|reason| ModelError::Fork { src, dst, reason })
    }

    /// Blocks a sequence can still take: free ones and cached ones nobody holds. Only the
    /// pools of layers without a sliding window count: a windowed pool is sized so that it
    /// never runs out. Likewise for [`Self::used_blocks`], [`Self::total_blocks`] and
    /// [`Self::blocks_needed`].
    pub fn free_blocks(&self) -> usize {
        self.paging.free_blocks()
    }

    /// Blocks held by sequences.
    pub fn used_blocks(&self) -> usize {
        self.paging.used_blocks()
    }

    pub fn total_blocks(&self) -> usize {
        self.paging.total_blocks()
    }

    /// The most blocks one sequence of `n_tokens` positions holds at once: what to set aside
    /// for it so that it can never find the pool exhausted.
    pub fn blocks_needed(&self, n_tokens: usize) -> usize {
        self.paging.blocks_needed(n_tokens)
    }

    /// Checks that a batch can run against this cache: sequence ids in range, each sequence's
    /// positions continuing where it left off, and room for them.
    fn check(&self, tokens: &[TokenPos]) -> Result<()> {
        if tokens.is_empty() {
            return Err(ModelError::Batch("the batch is empty".to_owned()));
        }
        if tokens.len() > self.layout.max_batch {
            return Err(ModelError::Batch(format!(
                "{} tokens, but the cache was made for batches of at most {}",
                tokens.len(),
                self.layout.max_batch
            )));
        }
        let lens: Vec<usize> = (0..self.layout.n_seq).map(|s| self.paging.len(s)).collect();
        let mut next = lens.clone();
        for (i, t) in tokens.iter().enumerate() {
            let Some(expected) = next.get_mut(t.seq) else {
                return Err(ModelError::Batch(format!(
                    "token {i} is for sequence {}, but the cache holds sequences 0..{}",
                    t.seq, self.layout.n_seq
                )));
            };
            if t.pos != *expected {
                return Err(ModelError::Batch(format!(
                    "token {i} of sequence {} has position {}, expected {} (positions must \
                     continue the sequence in order)",
                    t.seq, t.pos, *expected
                )));
            }
            *expected += 1;
        }
        for (seq, (&len, &end)) in lens.iter().zip(&next).enumerate() {
            if end > self.layout.n_ctx {
                return Err(ModelError::ContextFull {
                    seq,
                    len,
                    n_ctx: self.layout.n_ctx,
                    requested: end - len,
                });
            }
        }
        Ok(())
    }

    /// Makes the block copies that forks and truncations asked for.
    fn copy_pending(&mut self, backend: &B) -> Result<()> {
        let copies = self.paging.pending_copies();
        if !copies.is_empty() {
            backend.copy_kv_blocks(&mut self.storage, copies)?;
            self.paging.copies_done();
        }
        Ok(())
    }

    /// Runs one pass over the cache: checks the batch's places, makes the pending block
    /// copies, gives the batch's sequences the blocks it writes and hands `pass` the storage
    /// and where the pass reads and writes it. When `pass` succeeds the cache holds the
    /// tokens; when it fails, the blocks it took go back. Fails, changing nothing, when a pool
    /// is exhausted. [`crate::Model`] runs every forward pass through here; a backend's tests
    /// run single ops the same way.
    pub fn run_pass<R>(
        &mut self,
        backend: &B,
        tokens: &[u32],
        places: &[TokenPos],
        pass: impl FnOnce(&mut B::KvStorage, PassKv<'_>) -> Result<R>,
    ) -> Result<R> {
        self.check(places)?;
        self.copy_pending(backend)?;
        let result = {
            let (storage, kv) = self.begin_pass(places)?;
            pass(storage, kv)
        };
        self.end_pass(tokens, places, result.is_ok());
        result
    }

    /// Gives a checked batch's sequences the blocks it writes, and returns the storage and
    /// where the pass reads and writes it. Fails, changing nothing, when a pool is exhausted.
    fn begin_pass(&mut self, places: &[TokenPos]) -> Result<(&mut B::KvStorage, PassKv<'_>)> {
        self.paging.grow(places)?;
        let slots = (0..self.layout.groups.len())
            .map(|g| self.paging.slots(g, places))
            .collect();
        let tables = (0..self.layout.groups.len())
            .map(|g| self.paging.tables(g))
            .collect();
        let kv = PassKv::new(&self.layout, slots, tables);
        Ok((&mut self.storage, kv))
    }

    /// Records a pass begun with [`Self::begin_pass`]: its tokens if it wrote them, else the
    /// blocks it took go back.
    fn end_pass(&mut self, tokens: &[u32], places: &[TokenPos], written: bool) {
        if written {
            self.paging.written(tokens, places);
        } else {
            self.paging.abandon();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_group_by_window_and_windowed_pools_hold_a_window_and_a_batch() {
        let mut config = KvConfig::new(100, 2, 8).with_block_size(4);
        config.n_blocks = 30;
        let layout = KvLayout::new(
            &config,
            vec![
                LayerKv::new(1, 4, 4, Some(10)),
                LayerKv::new(1, 4, 4, None),
                LayerKv::new(1, 4, 4, Some(10)),
                LayerKv::new(1, 4, 4, Some(500)),
            ],
        );
        // Window 10 with batches of 8: 17 positions, in at most ⌈17/4⌉ + 1 = 6 blocks.
        // Window 500 is wider than the context: 25 blocks.
        assert_eq!(
            layout.groups,
            [
                KvGroup {
                    window: Some(10),
                    n_blocks: 12
                },
                KvGroup {
                    window: None,
                    n_blocks: 30
                },
                KvGroup {
                    window: Some(500),
                    n_blocks: 50
                },
            ]
        );
        let groups: Vec<usize> = layout.layers.iter().map(|l| l.group).collect();
        assert_eq!(groups, [0, 1, 0, 2]);
        assert_eq!(layout.layers[1].n_slots, 120);
        assert_eq!(layout.layers[0].visible(3), 0..4);
        assert_eq!(layout.layers[0].visible(25), 16..26);
        assert_eq!(layout.layers[1].visible(25), 0..26);
        assert_eq!(KvConfig::new(100, 2, 8).n_blocks, 14);
    }

    #[test]
    fn a_slot_is_the_block_times_the_block_size_plus_the_offset() {
        let tables = [vec![5, 2], vec![0, 7, 1]];
        let slots = [3];
        let t = BlockTables::new(8, &slots, &tables);
        assert_eq!(t.block_size(), 8);
        assert_eq!(t.of(0).slot(0), 40);
        assert_eq!(t.of(0).slot(9), 17);
        assert_eq!(t.of(1).slot(23), 15);
        assert!(t.of(2).blocks.is_empty());
    }
}
