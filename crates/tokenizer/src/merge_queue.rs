//! The priority queue of candidate merges that SentencePiece and BPE share: the candidate
//! with the lowest priority number goes first, the leftmost on ties.
//!
//! Short words use a binary heap. A very long word (a megabyte without a space) would make
//! that heap tens of megabytes, and every pop would walk it through cache misses; there
//! the queue keeps one bucket per priority instead. Candidates mostly enter a bucket from
//! left to right, so each bucket is a sorted run read front to back, with a small heap for
//! the few that arrive out of order. Both give exactly the same order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

/// A candidate: `(left symbol, right symbol, byte length of the pair)`. Ordered by left
/// symbol first; the rest only makes the order total.
pub(crate) type Candidate = (u32, u32, u32);

/// Words with more symbols than this use buckets.
const BUCKET_THRESHOLD: usize = 4096;

pub(crate) enum MergeQueue {
    Heap(BinaryHeap<Reverse<(u32, Candidate)>>),
    Buckets(Buckets),
}

impl MergeQueue {
    /// An empty queue suited to a word of `n_symbols` symbols.
    pub fn for_word(n_symbols: usize) -> MergeQueue {
        if n_symbols > BUCKET_THRESHOLD {
            MergeQueue::Buckets(Buckets::default())
        } else {
            MergeQueue::Heap(BinaryHeap::new())
        }
    }

    pub fn push(&mut self, priority: u32, candidate: Candidate) {
        match self {
            MergeQueue::Heap(heap) => heap.push(Reverse((priority, candidate))),
            MergeQueue::Buckets(buckets) => buckets.push(priority, candidate),
        }
    }

    pub fn pop(&mut self) -> Option<(u32, Candidate)> {
        match self {
            MergeQueue::Heap(heap) => heap.pop().map(|Reverse(item)| item),
            MergeQueue::Buckets(buckets) => buckets.pop(),
        }
    }
}

#[derive(Default)]
pub(crate) struct Buckets {
    buckets: FxHashMap<u32, Bucket>,
    /// The priorities whose buckets are not empty, each once.
    active: BinaryHeap<Reverse<u32>>,
}

#[derive(Default)]
struct Bucket {
    /// Sorted; entries before `next` are taken.
    run: Vec<Candidate>,
    next: usize,
    /// Candidates that arrived left of the run's end.
    stragglers: BinaryHeap<Reverse<Candidate>>,
}

impl Bucket {
    fn is_empty(&self) -> bool {
        self.next == self.run.len() && self.stragglers.is_empty()
    }

    fn push(&mut self, c: Candidate) {
        if self.next == self.run.len() {
            self.run.clear();
            self.next = 0;
        }
        if self.run.last().is_none_or(|&last| last <= c) {
            self.run.push(c);
        } else {
            self.stragglers.push(Reverse(c));
        }
    }

    fn pop(&mut self) -> Option<Candidate> {
        let from_run = self.run.get(self.next).copied();
        match (from_run, self.stragglers.peek()) {
            (Some(r), Some(&Reverse(s))) if s < r => self.stragglers.pop().map(|Reverse(c)| c),
            (Some(r), _) => {
                self.next += 1;
                Some(r)
            }
            (None, _) => self.stragglers.pop().map(|Reverse(c)| c),
        }
    }
}

impl Buckets {
    fn push(&mut self, priority: u32, c: Candidate) {
        let bucket = self.buckets.entry(priority).or_default();
        if bucket.is_empty() {
            self.active.push(Reverse(priority));
        }
        bucket.push(c);
    }

    fn pop(&mut self) -> Option<(u32, Candidate)> {
        let &Reverse(priority) = self.active.peek()?;
        let bucket = self
            .buckets
            .get_mut(&priority)
            .expect("active buckets exist");
        let c = bucket.pop().expect("active buckets are not empty");
        if bucket.is_empty() {
            self.active.pop();
        }
        Some((priority, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_pop_in_heap_order() {
        let mut state = 12345u64;
        let mut rand = move |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) % n) as u32
        };
        let mut heap = MergeQueue::for_word(0);
        let mut buckets = MergeQueue::for_word(usize::MAX);
        for round in 0..20_000u32 {
            if rand(3) == 0 {
                assert_eq!(heap.pop(), buckets.pop(), "round {round}");
            } else {
                let (p, left) = (rand(50), rand(1000) + round / 4);
                heap.push(p, (left, left + 1, 2));
                buckets.push(p, (left, left + 1, 2));
            }
        }
        while let Some(item) = heap.pop() {
            assert_eq!(Some(item), buckets.pop());
        }
        assert_eq!(buckets.pop(), None);
    }
}
