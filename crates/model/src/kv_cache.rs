//! The KV cache: per layer, the keys and values of every position of several sequences, so that
//! each new token attends to its sequence's past without recomputing it.
//!
//! The storage belongs to the backend (host memory, device memory); this module owns the shape
//! of it ([`KvLayout`]) and the bookkeeping every backend shares: how many positions each
//! sequence holds, and whether a batch fits.
//!
//! Each sequence's positions must arrive in order, from 0, without gaps. A layer with a sliding
//! window of `w` keeps only a ring of `w + max_batch - 1` positions per sequence: enough for the
//! oldest token of a batch to still see its `w − 1` predecessors after the whole batch has been
//! written. Position `p` lives in slot `p mod capacity`.

use std::ops::Range;

use crate::backend::{Backend, TokenPos};
use crate::{ModelError, Result};

/// How large a cache to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvConfig {
    /// Positions each sequence may hold.
    pub n_ctx: usize,
    /// Sequences: ids `0..n_seq`.
    pub n_seq: usize,
    /// The most tokens one forward pass may carry (all sequences together).
    pub max_batch: usize,
}

/// The shape of the whole cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvLayout {
    pub n_ctx: usize,
    pub n_seq: usize,
    pub max_batch: usize,
    pub layers: Vec<LayerKv>,
}

/// The shape of one layer's cache, for one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerKv {
    pub n_head_kv: usize,
    pub head_dim_k: usize,
    pub head_dim_v: usize,
    /// Sliding window: a token sees itself and the `window − 1` positions before it.
    pub window: Option<usize>,
    /// Positions stored per sequence.
    pub capacity: usize,
}

impl LayerKv {
    pub fn new(
        n_head_kv: usize,
        head_dim_k: usize,
        head_dim_v: usize,
        window: Option<usize>,
        config: &KvConfig,
    ) -> Self {
        let capacity = match window {
            Some(w) => (w + config.max_batch - 1).min(config.n_ctx),
            None => config.n_ctx,
        };
        LayerKv {
            n_head_kv,
            head_dim_k,
            head_dim_v,
            window,
            capacity,
        }
    }

    /// The slot that holds position `pos`.
    pub fn slot(&self, pos: usize) -> usize {
        pos % self.capacity
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

/// A KV cache for one model on one backend.
pub struct KvCache<B: Backend> {
    layout: KvLayout,
    /// Positions held by each sequence.
    lens: Vec<usize>,
    storage: B::KvStorage,
}

impl<B: Backend> KvCache<B> {
    pub(crate) fn new(layout: KvLayout, storage: B::KvStorage) -> Self {
        KvCache {
            lens: vec![0; layout.n_seq],
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

    /// Positions sequence `seq` holds: the position its next token must have.
    pub fn seq_len(&self, seq: usize) -> usize {
        self.lens[seq]
    }

    /// Forgets a sequence, so that it starts again at position 0.
    pub fn clear_seq(&mut self, seq: usize) {
        self.lens[seq] = 0;
    }

    /// Keeps only the first `len` positions of sequence `seq`, so that it continues at `len`:
    /// a prompt that shares a prefix with what the cache holds evaluates only the rest.
    ///
    /// A sliding-window layer holds a ring of recent positions only. When the ring no longer
    /// holds the positions a token at `len` must see, this fails and changes nothing; clear
    /// the sequence and evaluate it again from the start.
    pub fn truncate(&mut self, seq: usize, len: usize) -> Result<()> {
        let Some(&held) = self.lens.get(seq) else {
            return Err(ModelError::Truncate {
                seq,
                len,
                reason: format!("the cache holds sequences 0..{}", self.layout.n_seq),
            });
        };
        check_truncate(&self.layout.layers, held, len).map_err(|reason| ModelError::Truncate {
            seq,
            len,
            reason,
        })?;
        self.lens[seq] = len;
        Ok(())
    }

    /// Checks that a batch can run against this cache: sequence ids in range, each sequence's
    /// positions continuing where it left off, and room for them.
    pub(crate) fn check(&self, tokens: &[TokenPos]) -> Result<()> {
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
        let mut next = self.lens.clone();
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
        for (seq, (&len, &end)) in self.lens.iter().zip(&next).enumerate() {
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

    /// Records that a checked batch has been written.
    pub(crate) fn advance(&mut self, tokens: &[TokenPos]) {
        for t in tokens {
            self.lens[t.seq] = t.pos + 1;
        }
    }

    pub(crate) fn storage_mut(&mut self) -> &mut B::KvStorage {
        &mut self.storage
    }
}

/// Why a sequence holding `held` positions cannot continue at `len`, if it cannot.
fn check_truncate(layers: &[LayerKv], held: usize, len: usize) -> Result<(), String> {
    if len > held {
        return Err(format!("it holds only {held} positions"));
    }
    for (il, layer) in layers.iter().enumerate() {
        let Some(window) = layer.window else { continue };
        let oldest_held = held.saturating_sub(layer.capacity);
        let oldest_needed = (len + 1).saturating_sub(window);
        if oldest_needed < oldest_held {
            return Err(format!(
                "layer {il} has a sliding window of {window}, and its ring holds only \
                 positions {oldest_held}..{held}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: KvConfig = KvConfig {
        n_ctx: 100,
        n_seq: 2,
        max_batch: 8,
    };

    #[test]
    fn window_ring_holds_a_window_plus_a_batch() {
        let layer = LayerKv::new(1, 4, 4, Some(10), &CONFIG);
        assert_eq!(layer.capacity, 17);
        assert_eq!(layer.visible(3), 0..4);
        assert_eq!(layer.visible(25), 16..26);
        // The oldest query of a full batch ending at position 40 sees 24..34; the batch writes
        // 33..41. None of them may share a slot.
        let live: Vec<usize> = (24..41).map(|p| layer.slot(p)).collect();
        let mut dedup = live.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), live.len());

        let global = LayerKv::new(1, 4, 4, None, &CONFIG);
        assert_eq!(global.capacity, 100);
        assert_eq!(global.visible(25), 0..26);
        let tiny = LayerKv::new(1, 4, 4, Some(512), &CONFIG);
        assert_eq!(tiny.capacity, 100);
    }

    #[test]
    fn truncation_keeps_what_a_window_ring_still_holds() {
        // Window 10, batches of 8: a ring of 17 positions.
        let local = LayerKv::new(1, 4, 4, Some(10), &CONFIG);
        let global = LayerKv::new(1, 4, 4, None, &CONFIG);
        let layers = [global, local];
        assert_eq!(check_truncate(&[global], 90, 0), Ok(()));
        assert_eq!(check_truncate(&layers, 12, 3), Ok(()));
        // Holding 0..40, the ring has 23..40; a token at 32 sees 23..33.
        assert_eq!(check_truncate(&layers, 40, 32), Ok(()));
        let err = check_truncate(&layers, 40, 31).unwrap_err();
        assert!(err.contains("layer 1") && err.contains("23..40"), "{err}");
        assert!(check_truncate(&layers, 40, 41)
            .unwrap_err()
            .contains("only 40"));
    }
}

// ---------------------------------------------------------------------------------------------
// STAND-IN for the paged KV cache (issue 12, Part A), so that the scheduler in plumb-engine can
// be written against Part A's interface before it lands. Replace this whole block with Part A's
// real implementation at merge time. The accounting pretends that every sequence owns
// `n_ctx / block_size` blocks of its own (today's reservation); nothing is shared.
// ---------------------------------------------------------------------------------------------

/// Stand-in: tokens per block (Part A's `KvConfig::DEFAULT_BLOCK_SIZE`).
const STAND_IN_BLOCK_SIZE: usize = 16;

impl KvConfig {
    /// Stand-in: a cache where all `n_seq` sequences can hold `n_ctx` positions.
    pub fn new(n_ctx: usize, n_seq: usize, max_batch: usize) -> KvConfig {
        KvConfig {
            n_ctx,
            n_seq,
            max_batch,
        }
    }
}

impl<B: Backend> KvCache<B> {
    /// Stand-in: no prefix cache yet, so nothing is ever reused.
    pub fn reuse_prefix(&mut self, _seq: usize, _tokens: &[u32]) -> usize {
        0
    }

    /// Stand-in: forking needs Part A's block copies; callers evaluate the prompt instead.
    pub fn fork(&mut self, src: usize, dst: usize) -> Result<()> {
        Err(ModelError::Batch(format!(
            "cannot fork sequence {src} into {dst}: this KV cache does not share blocks"
        )))
    }

    /// Stand-in: blocks not holding any sequence's positions.
    pub fn free_blocks(&self) -> usize {
        self.total_blocks() - self.used_blocks()
    }

    /// Stand-in: blocks holding positions.
    pub fn used_blocks(&self) -> usize {
        self.lens.iter().map(|&len| self.blocks_needed(len)).sum()
    }

    /// Stand-in: every sequence's full context.
    pub fn total_blocks(&self) -> usize {
        self.layout.n_seq * self.blocks_needed(self.layout.n_ctx)
    }

    /// Stand-in: the blocks `n_tokens` positions take.
    pub fn blocks_needed(&self, n_tokens: usize) -> usize {
        n_tokens.div_ceil(STAND_IN_BLOCK_SIZE)
    }

    /// Stand-in: tokens per block.
    pub fn block_size(&self) -> usize {
        STAND_IN_BLOCK_SIZE
    }
}
