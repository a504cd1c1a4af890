//! The paged KV cache on small synthetic models: sequences whose blocks are scattered over the
//! pool, prefixes reused from the prefix cache and forked sequences all give exactly the
//! logits of each sequence computed alone in a fresh cache (the reference's attention does
//! not depend on where a position's slot is), and gemma3's local layers give back blocks
//! beyond their window.

mod common;

use common::{file_of, full_pass, tiny_model, with_key, Synthetic, ARCHS};
use plumb_backend_ref::RefBackend;
use plumb_model::{Batch, KvCache, KvConfig, LogitsFor, Model, ModelError};

/// A cache in blocks of `block_size`, with room for every sequence.
fn paged(model: &Model<RefBackend>, n_seq: usize, block_size: usize) -> KvCache<RefBackend> {
    let config = KvConfig::new(64, n_seq, 16).with_block_size(block_size);
    model.new_kv_cache(config).unwrap()
}

/// Tokens `0..n` spread over the synthetic vocabulary of 64, differing by `seed`.
fn tokens(seed: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i * 7 + seed * 13 + 1) % 64)
        .collect()
}

/// Takes and frees blocks in a shuffled order, so that later sequences get scattered ones.
fn scatter(model: &Model<RefBackend>, cache: &mut KvCache<RefBackend>, seqs: &[usize]) {
    for (i, &seq) in seqs.iter().enumerate() {
        let junk = tokens(40 + i as u32, 3 + 5 * i);
        model.eval(cache, seq, &junk, LogitsFor::Last).unwrap();
    }
    for &seq in seqs.iter().rev().step_by(2).chain(seqs.iter().step_by(2)) {
        cache.clear_seq(seq);
    }
}

#[test]
fn interleaved_sequences_in_scattered_blocks_equal_each_alone() {
    for arch in ARCHS {
        let model = tiny_model(arch);
        let seqs = [tokens(1, 23), tokens(2, 17), tokens(3, 9)];
        let want: Vec<_> = seqs.iter().map(|s| full_pass(&model, s)).collect();
        let mut cache = paged(&model, 6, 2);
        scatter(&model, &mut cache, &[3, 4, 5, 1]);
        // Batches of up to 16 tokens, taking 1 to 5 tokens of each sequence in turn.
        let mut next = [0; 3];
        let mut round = 0;
        while next.iter().zip(&seqs).any(|(&n, s)| n < s.len()) {
            let mut batch = Batch::new();
            for (seq, tokens) in seqs.iter().enumerate() {
                let take = (1 + (round + seq) % 5).min(tokens.len() - next[seq]);
                for (pos, &token) in tokens.iter().enumerate().skip(next[seq]).take(take) {
                    batch.push(token, seq, pos, true);
                }
                next[seq] += take;
            }
            let logits = model.forward(&batch, &mut cache).unwrap();
            for (i, place) in batch.places().iter().enumerate() {
                assert!(
                    logits.for_token(i).unwrap() == want[place.seq][place.pos],
                    "{arch}: sequence {} position {} differs from the sequence alone",
                    place.seq,
                    place.pos
                );
            }
            round += 1;
        }
    }
}

#[test]
fn a_reused_prefix_gives_the_logits_of_computing_it() {
    for arch in ARCHS {
        let model = tiny_model(arch);
        let first = tokens(1, 21);
        let mut second = first[..13].to_vec();
        second.extend(tokens(5, 6));
        let want = full_pass(&model, &second);
        let mut cache = paged(&model, 3, 4);
        model.eval(&mut cache, 0, &first, LogitsFor::Last).unwrap();
        // While sequence 0 still holds the blocks: three whole blocks of 4 are shared. Then,
        // after both let go of theirs, the four whole blocks sequence 1 computed.
        for (seq, shared) in [(1, 12), (2, 16)] {
            if seq == 2 {
                cache.clear_seq(0);
                cache.clear_seq(1);
                assert_eq!(cache.used_blocks(), 0);
            }
            let reused = cache.reuse_prefix(seq, &second);
            assert_eq!(reused, shared, "{arch}: sequence {seq}");
            assert_eq!(cache.seq_len(seq), shared);
            let logits = model
                .eval(&mut cache, seq, &second[reused..], LogitsFor::All)
                .unwrap();
            for (i, row) in logits.rows().enumerate() {
                assert!(
                    row == want[reused + i],
                    "{arch}: position {} after a reused prefix differs",
                    reused + i
                );
            }
        }
        // The prompt's last token is always evaluated, even when every block is cached.
        assert_eq!(cache.reuse_prefix(0, &first[..12]), 8);
    }
}

#[test]
fn a_forked_sequence_continues_exactly_like_its_source() {
    for arch in ARCHS {
        let model = tiny_model(arch);
        let prompt = tokens(1, 10);
        let mut cache = paged(&model, 3, 4);
        model.eval(&mut cache, 0, &prompt, LogitsFor::Last).unwrap();
        cache.fork(0, 1).unwrap();
        cache.fork(0, 2).unwrap();
        assert_eq!(cache.seq_len(2), 10);
        // Each continues differently, one token per pass, all three in one batch: the
        // partial block each writes must be its own.
        let tails = [tokens(2, 7), tokens(3, 7), tokens(4, 7)];
        let want: Vec<_> = tails
            .iter()
            .map(|tail| full_pass(&model, &[prompt.clone(), tail.clone()].concat()))
            .collect();
        for step in 0..7 {
            let mut batch = Batch::new();
            for (seq, tail) in tails.iter().enumerate() {
                batch.push(tail[step], seq, 10 + step, true);
            }
            let logits = model.forward(&batch, &mut cache).unwrap();
            for (seq, want) in want.iter().enumerate() {
                assert!(
                    logits.row(seq) == want[10 + step],
                    "{arch}: sequence {seq} at position {} differs",
                    10 + step
                );
            }
        }
        let err = cache.fork(0, 1).unwrap_err().to_string();
        assert!(err.contains("not empty"), "{err}");
    }
}

#[test]
fn an_exhausted_pool_is_an_error_and_the_cache_stays_usable() {
    let model = tiny_model("llama");
    let mut config = KvConfig::new(64, 2, 16).with_block_size(4);
    config.n_blocks = 5;
    let mut cache = model.new_kv_cache(config).unwrap();
    assert_eq!((cache.total_blocks(), cache.blocks_needed(9)), (5, 3));
    let first = tokens(1, 12);
    model.eval(&mut cache, 0, &first, LogitsFor::Last).unwrap();
    let err = model
        .eval(&mut cache, 1, &tokens(2, 9), LogitsFor::Last)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::KvPoolExhausted {
                needed: 3,
                free: 2,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!((cache.seq_len(1), cache.used_blocks()), (0, 3));
    // Sequence 0 goes on from where it was.
    let want = full_pass(&model, &[first.clone(), vec![5]].concat());
    let logits = model.eval(&mut cache, 0, &[5], LogitsFor::Last).unwrap();
    assert!(logits.last().unwrap() == want[12]);
}

#[test]
fn gemma3_beyond_its_window_gives_back_local_blocks_and_equals_one_pass() {
    let spec = Synthetic {
        n_ctx_train: 1024,
        ..Synthetic::tiny("gemma3")
    };
    let model = Model::from_file(
        file_of(&with_key(
            spec.writer(7),
            "gemma3.attention.sliding_window",
            512u32,
        )),
        RefBackend::new(),
    )
    .unwrap();
    let all = tokens(1, 600);
    let want = full_pass(&model, &all);
    // Batches of 64: the local pool holds ⌈(511 + 64) / 16⌉ + 1 = 37 blocks of 16, fewer than
    // the 38 that 600 positions fill, so it must give blocks back to get there.
    let mut cache = model.new_kv_cache(KvConfig::new(600, 1, 64)).unwrap();
    let logits = model.eval(&mut cache, 0, &all, LogitsFor::All).unwrap();
    for (pos, row) in logits.rows().enumerate() {
        assert!(row == want[pos], "position {pos} differs from one pass");
    }
    // Cut back into the window and go on: the blocks it needs are still cached.
    cache.truncate(0, 590).unwrap();
    let logits = model
        .eval(&mut cache, 0, &all[590..], LogitsFor::All)
        .unwrap();
    for (i, row) in logits.rows().enumerate() {
        assert!(row == want[590 + i], "position {} differs", 590 + i);
    }
}
