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

use half::f16;
use half::slice::HalfFloatSliceExt;
use plumb_backend_ref::{dot, HostTensor};
use plumb_model::{Activations, AttentionStep, LayerKv, TokenPos};
use wide::f32x8;

use crate::kv_storage::{decode, CpuKvStorage, KvCacheType, LayerStore};
use crate::pool::{for_each_unit, ThreadPool};
use crate::shared_out::SharedOut;

/// Positions decoded and scored together.
const BLOCK: usize = 32;
/// Most tokens in a tile.
const TILE: usize = 16;

thread_local! {
    /// Each pool thread's buffers, kept between calls.
    static WORK: std::cell::RefCell<Option<TileWork>> = const { std::cell::RefCell::new(None) };
}

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
    for_each_unit(pool, units, &|unit| {
        let (tile, g) = (&tiles[unit / shape.n_head_kv], unit % shape.n_head_kv);
        WORK.with_borrow_mut(|work| {
            let work =
                work.get_or_insert_with(|| TileWork::new(&shape, step.n_head / shape.n_head_kv));
            if work.shape != shape || work.group != step.n_head / shape.n_head_kv {
                *work = TileWork::new(&shape, step.n_head / shape.n_head_kv);
            }
            work.run(layer, cache_type, q, step, tile.clone(), g);
            for (t, states) in tile.clone().zip(work.states.chunks(work.group)) {
                for (j, state) in states.iter().enumerate() {
                    let h = g * work.group + j;
                    let hd_v = shape.head_dim_v;
                    // SAFETY: head h of token t belongs to whichever thread runs unit (tile, g).
                    let dst = unsafe { shared.slice(t * out_width + h * hd_v, hd_v) };
                    state.finish(dst);
                }
            }
        });
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
    /// The tile's queries for this KV head's group, `[token][head][head_dim_k]`.
    queries: Vec<f32>,
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
            queries: Vec::new(),
            states: (0..TILE * group)
                .map(|_| HeadState::new(shape.head_dim_v))
                .collect(),
        }
    }

    /// Attends `tile` with KV head `g`, compiled for the widest vector unit this CPU has:
    /// the same code built for AVX-512 runs attention in about half the time of a baseline
    /// x86-64 build.
    fn run(
        &mut self,
        layer: &LayerStore,
        cache_type: KvCacheType,
        q: &HostTensor,
        step: &AttentionStep<'_>,
        tile: Range<usize>,
        g: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        {
            if *HAS_AVX512 {
                // SAFETY: the CPU has AVX-512F (checked at run time).
                return unsafe { self.run_avx512(layer, cache_type, q, step, tile, g) };
            }
            if *HAS_AVX2_FMA {
                // SAFETY: the CPU has AVX2 and FMA (checked at run time).
                return unsafe { self.run_avx2(layer, cache_type, q, step, tile, g) };
            }
        }
        self.run_body(layer, cache_type, q, step, tile, g)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn run_avx512(
        &mut self,
        layer: &LayerStore,
        cache_type: KvCacheType,
        q: &HostTensor,
        step: &AttentionStep<'_>,
        tile: Range<usize>,
        g: usize,
    ) {
        self.run_body(layer, cache_type, q, step, tile, g)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(
        &mut self,
        layer: &LayerStore,
        cache_type: KvCacheType,
        q: &HostTensor,
        step: &AttentionStep<'_>,
        tile: Range<usize>,
        g: usize,
    ) {
        self.run_body(layer, cache_type, q, step, tile, g)
    }

    #[inline(always)]
    fn run_body(
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
        let needed = tile.len() * self.group;
        if self.states.len() < needed {
            self.states.resize_with(needed, || HeadState::new(hd_v));
        }
        for state in &mut self.states[..needed] {
            state.reset();
        }
        // The tile's query heads of this group, `[token][head]`. llama.cpp multiplies f16 keys
        // by queries rounded to f16; so does this. Matching that rounding, rather than keeping
        // f32 queries, is what keeps the top-1 choices where llama.cpp is sure of them.
        self.queries.resize(needed * hd_k, 0.0);
        for (c, t) in tile.clone().enumerate() {
            let src = &q.row(t)[g * self.group * hd_k..(g + 1) * self.group * hd_k];
            let dst = &mut self.queries[c * self.group * hd_k..(c + 1) * self.group * hd_k];
            if cache_type == KvCacheType::F16 {
                round_to_f16(src, dst);
            } else {
                dst.copy_from_slice(src);
            }
        }

        let mut p0 = first;
        while p0 < last {
            let block = p0..(p0 + BLOCK).min(last);
            for (r, pos) in block.clone().enumerate() {
                let keys = &mut self.keys[r * hd_k..(r + 1) * hd_k];
                decode(cache_type, layer.k_row(seq, pos), g * hd_k, keys);
                let values = &mut self.values[r * hd_v..(r + 1) * hd_v];
                decode(cache_type, layer.v_row(seq, pos), g * hd_v, values);
            }
            for (c, _) in tile.clone().enumerate() {
                let seen = block.start.max(visible[c].start)..block.end.min(visible[c].end);
                if seen.is_empty() {
                    continue;
                }
                let rows = seen.start - block.start..seen.end - block.start;
                let keys = &self.keys[rows.start * hd_k..rows.end * hd_k];
                let values = &self.values[rows.start * hd_v..rows.end * hd_v];
                for j in 0..self.group {
                    let q_h = &self.queries[(c * self.group + j) * hd_k..][..hd_k];
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

/// `dst ← f16(src)`, through f16 in chunks (the slice conversions use F16C where present).
#[inline(always)]
fn round_to_f16(src: &[f32], dst: &mut [f32]) {
    let mut halves = [f16::ZERO; 64];
    for (s, d) in src.chunks(64).zip(dst.chunks_mut(64)) {
        let halves = &mut halves[..s.len()];
        halves.convert_from_f32_slice(s);
        halves.convert_to_f32_slice(d);
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

    fn reset(&mut self) {
        self.max = f32::NEG_INFINITY;
        self.sum = 0.0;
        self.acc.fill(0.0);
    }

    /// Takes in one block of scores and their value rows.
    #[inline(always)]
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

/// `s ← e^(s − max)` for every score (all `s ≤ max`, so nothing overflows).
#[inline(always)]
fn exp_shifted(scores: &mut [f32], max: f32) {
    let m = f32x8::splat(max);
    let floor = f32x8::splat(-87.0);
    let mut chunks = scores.chunks_exact_mut(8);
    for c in &mut chunks {
        // Clamped: `wide`'s exp gives 0 rather than a tiny value from −88 on, which is what
        // the weight should be anyway, but it must not be fed −∞ − −∞.
        let e = (lanes(c) - m).fast_max(floor).exp();
        c.copy_from_slice(&e.to_array());
    }
    for s in chunks.into_remainder() {
        *s = (*s - max).exp();
    }
}

fn lanes(s: &[f32]) -> f32x8 {
    f32x8::new(s.try_into().expect("8 lanes"))
}

#[inline(always)]
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

#[cfg(target_arch = "x86_64")]
static HAS_AVX512: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::arch::is_x86_feature_detected!("avx512f"));
#[cfg(target_arch = "x86_64")]
static HAS_AVX2_FMA: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
});
