//! Causal attention over the KV cache, blocked, with an online softmax.
//!
//! The batch's tokens are cut into tiles of consecutive tokens of one sequence. One unit of
//! work, owned by one thread, is a tile and a KV head: it walks the positions the tile's tokens
//! see in blocks, decodes each block of keys and values from the cache type once, and scores
//! it against every query head of every token of the tile that sees it. The softmax is
//! computed online (a running maximum and sum, rescaled as larger scores arrive), so a long
//! prompt needs no score matrix, and each key is decoded once per tile instead of once per
//! token. Every (token, head) is computed by one thread in a fixed order, so the result does
//! not depend on the thread count or on how the batch was split.

use std::ops::Range;

use plumb_backend_ref::HostTensor;
use plumb_model::{Activations, AttentionStep, LayerKv, TokenPos};
use wide::f32x8;

use crate::kv_storage::{decode, CpuKvStorage, KvCacheType, LayerStore};
use crate::pool::{split, ThreadPool};
use crate::shared_out::SharedOut;

/// Positions decoded and scored together.
const BLOCK: usize = 32;
/// Most tokens in a tile.
const TILE: usize = 16;

/// Stores the batch's keys and values, then attends. The caller has checked the shapes.
pub fn attention(
    pool: &ThreadPool,
    q: &HostTensor,
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut CpuKvStorage,
    step: &AttentionStep<'_>,
) -> HostTensor {
    let cache_type = kv.cache_type;
    let layer = &mut kv.layers[step.layer];
    for (t, place) in step.tokens.iter().enumerate() {
        layer.store(cache_type, place.seq, place.pos, k.row(t), v.row(t));
    }
    let layer = &*layer;
    let shape = layer.shape;
    let n = q.n_tokens();
    let out_width = step.n_head * shape.head_dim_v;
    let mut out = vec![0.0f32; n * out_width];
    let shared = SharedOut::new(&mut out);
    let tiles = tiles(step.tokens);
    let units = tiles.len() * shape.n_head_kv;
    pool.run(&|i| {
        let mut work = TileWork::new(&shape, step.n_head / shape.n_head_kv);
        for unit in split(units, i, pool.n_threads(), 1) {
            let (tile, g) = (&tiles[unit / shape.n_head_kv], unit % shape.n_head_kv);
            work.run(layer, cache_type, q, step, tile.clone(), g);
            for (t, states) in tile.clone().zip(work.states.chunks(work.group)) {
                for (j, state) in states.iter().enumerate() {
                    let h = g * work.group + j;
                    let hd_v = shape.head_dim_v;
                    // SAFETY: head h of token t belongs to the thread owning unit (tile, g).
                    let dst = unsafe { shared.slice(t * out_width + h * hd_v, hd_v) };
                    state.finish(dst);
                }
            }
        }
    });
    HostTensor::new(n, out_width, out)
}

/// Runs of at most [`TILE`] consecutive batch rows that continue one sequence position by
/// position.
fn tiles(tokens: &[TokenPos]) -> Vec<Range<usize>> {
    let mut tiles: Vec<Range<usize>> = Vec::new();
    for (t, place) in tokens.iter().enumerate() {
        match tiles.last_mut() {
            Some(tile)
                if tile.len() < TILE
                    && tokens[t - 1].seq == place.seq
                    && tokens[t - 1].pos + 1 == place.pos =>
            {
                tile.end = t + 1
            }
            _ => tiles.push(t..t + 1),
        }
    }
    tiles
}

/// One thread's buffers for attending one tile with one KV head.
struct TileWork {
    shape: LayerKv,
    group: usize,
    keys: Vec<f32>,
    values: Vec<f32>,
    scores: [f32; BLOCK],
    /// `[token of the tile][query head of the group]`.
    states: Vec<HeadState>,
}

impl TileWork {
    fn new(shape: &LayerKv, group: usize) -> Self {
        TileWork {
            shape: *shape,
            group,
            keys: vec![0.0; BLOCK * shape.head_dim_k],
            values: vec![0.0; BLOCK * shape.head_dim_v],
            scores: [0.0; BLOCK],
            states: (0..TILE * group)
                .map(|_| HeadState::new(shape.head_dim_v))
                .collect(),
        }
    }

    fn run(
        &mut self,
        layer: &LayerStore,
        cache_type: KvCacheType,
        q: &HostTensor,
        step: &AttentionStep<'_>,
        tile: Range<usize>,
        g: usize,
    ) {
        let (hd_k, hd_v) = (self.shape.head_dim_k, self.shape.head_dim_v);
        let seq = step.tokens[tile.start].seq;
        let visible: Vec<Range<usize>> = tile
            .clone()
            .map(|t| self.shape.visible(step.tokens[t].pos))
            .collect();
        let first = visible.iter().map(|r| r.start).min().unwrap_or(0);
        let last = visible.iter().map(|r| r.end).max().unwrap_or(0);
        self.states.truncate(0);
        self.states
            .resize_with(tile.len() * self.group, || HeadState::new(hd_v));

        let mut p0 = first;
        while p0 < last {
            let block = p0..(p0 + BLOCK).min(last);
            for (r, pos) in block.clone().enumerate() {
                let keys = &mut self.keys[r * hd_k..(r + 1) * hd_k];
                decode(cache_type, layer.k_row(seq, pos), g * hd_k, keys);
                let values = &mut self.values[r * hd_v..(r + 1) * hd_v];
                decode(cache_type, layer.v_row(seq, pos), g * hd_v, values);
            }
            for (c, t) in tile.clone().enumerate() {
                let seen = block.start.max(visible[c].start)..block.end.min(visible[c].end);
                if seen.is_empty() {
                    continue;
                }
                let rows = seen.start - block.start..seen.end - block.start;
                let keys = &self.keys[rows.start * hd_k..rows.end * hd_k];
                let values = &self.values[rows.start * hd_v..rows.end * hd_v];
                for j in 0..self.group {
                    let h = g * self.group + j;
                    let q_h = &q.row(t)[h * hd_k..(h + 1) * hd_k];
                    let scores = &mut self.scores[..rows.len()];
                    for (s, key) in scores.iter_mut().zip(keys.chunks_exact(hd_k)) {
                        *s = step.scale * dot(q_h, key);
                    }
                    self.states[c * self.group + j].absorb(scores, values);
                }
            }
            p0 = block.end;
        }
    }
}

/// The running softmax-weighted sum of one query head.
struct HeadState {
    max: f32,
    sum: f32,
    acc: Vec<f32>,
}

impl HeadState {
    fn new(head_dim_v: usize) -> Self {
        HeadState {
            max: f32::NEG_INFINITY,
            sum: 0.0,
            acc: vec![0.0; head_dim_v],
        }
    }

    /// Takes in one block of scores and their value rows.
    fn absorb(&mut self, scores: &mut [f32], values: &[f32]) {
        let block_max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if block_max > self.max {
            let rescale = (self.max - block_max).exp();
            self.sum *= rescale;
            for a in self.acc.iter_mut() {
                *a *= rescale;
            }
            self.max = block_max;
        }
        exp_shifted(scores, self.max);
        let hd = self.acc.len();
        for (&w, value) in scores.iter().zip(values.chunks_exact(hd)) {
            self.sum += w;
            axpy(w, value, &mut self.acc);
        }
    }

    fn finish(&self, out: &mut [f32]) {
        let inv = 1.0 / self.sum;
        for (o, a) in out.iter_mut().zip(&self.acc) {
            *o = a * inv;
        }
    }
}

/// `s ← e^(s − max)` for every score.
fn exp_shifted(scores: &mut [f32], max: f32) {
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
    }
}

fn lanes(s: &[f32]) -> f32x8 {
    f32x8::new(s.try_into().expect("8 lanes"))
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    let mut acc = f32x8::ZERO;
    for (x, y) in ca.zip(cb) {
        acc = lanes(x).mul_add(lanes(y), acc);
    }
    acc.reduce_add() + tail
}

/// `acc += w · x`.
fn axpy(w: f32, x: &[f32], acc: &mut [f32]) {
    let wv = f32x8::splat(w);
    let mut ca = acc.chunks_exact_mut(8);
    let mut cx = x.chunks_exact(8);
    for (a, v) in (&mut ca).zip(&mut cx) {
        let r = lanes(v).mul_add(wv, lanes(a));
        a.copy_from_slice(&r.to_array());
    }
    for (a, v) in ca.into_remainder().iter_mut().zip(cx.remainder()) {
        *a += w * v;
    }
}
