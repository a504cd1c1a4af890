//! Causal attention over the KV cache, blocked like a matrix product, with an online softmax.
//!
//! The batch's tokens are cut into tiles of consecutive tokens of one sequence. One unit of
//! work, owned by one thread, is a tile and a KV head; its rows are the tile's (token, query
//! head of the group) pairs. It walks the positions the tile sees in blocks of [`BLOCK`]
//! positions that start at multiples of [`BLOCK`], decodes each block's keys and values from
//! the cache type once, and then:
//! - scores every row against the block's keys with the rows side by side in vector lanes:
//!   the queries are kept transposed (`[dim][row]`), so each key's dimension `d` is broadcast
//!   and multiplied into whole vectors of rows, and a few keys × a few row vectors of running
//!   dot products stay in registers over all dimensions, with no sums across lanes;
//! - updates each row's online softmax (running maximum and sum of weights, the row's output
//!   rescaled when its maximum grows); positions a row does not see get weight exactly 0;
//! - adds the weighted values to the rows' outputs, a few rows × a chunk of output dimensions
//!   held in registers over all the block's keys.
//!
//! Every row's numbers come from lane-by-lane operations in an order set by the row's query
//! and the positions it sees, never by the other rows of its tile: keys only its tile mates
//! see add exactly nothing (weight 0, running values multiplied by 1), and blocks are aligned
//! to positions, not to the tile. So a token's attention does not depend on how the batch was
//! split into tiles or on the thread count.
//!
//! The kernels are written once over [`Lanes`], a vector of f32 lanes with one implementation
//! per instruction set, and run with those of the [`Isa`] the backend detected.

use std::ops::Range;

use half::f16;
use plumb_backend_ref::HostTensor;
use plumb_ggml::Isa;
use plumb_model::{Activations, BlockTables, TokenPos};

use crate::kv_storage::{decode, CpuKvStorage, KvCacheType, LayerStore};
#[cfg(target_arch = "aarch64")]
use crate::lanes::Neon;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
use crate::lanes::Simd128;
#[cfg(target_arch = "x86_64")]
use crate::lanes::{Avx2, Avx512};
use crate::lanes::{Lanes, Scalar};
use crate::pool::{for_each_unit, ThreadPool};
use crate::shared_out::SharedOut;

/// Positions decoded and scored together.
const BLOCK: usize = 32;
/// Most tokens in a tile.
const TILE: usize = 16;

thread_local! {
    /// Each pool thread's buffers, kept between calls.
    static WORK: std::cell::RefCell<TileWork> = std::cell::RefCell::new(TileWork::default());
}

/// One layer's attention over one pass, as the kernels read it.
pub struct LayerPass<'a> {
    pub layer: usize,
    /// Sequence and position of every token (row) of the batch.
    pub tokens: &'a [TokenPos],
    pub n_head: usize,
    /// The factor applied to `q·k` before the softmax.
    pub scale: f32,
    /// Soft-capping of the scaled scores, `c·tanh(score/c)` (gemma2).
    pub softcap: Option<f32>,
    /// The block tables each token reads through.
    pub kv: BlockTables<'a>,
}

/// Stores the batch's keys and values of layer `layer` in their slots, in the cache's type.
/// The caller has checked the shapes and slots.
pub fn store_kv(
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut CpuKvStorage,
    layer: usize,
    slots: &[usize],
) {
    let cache_type = kv.cache_type;
    let layer = &mut kv.layers[layer];
    for (t, &slot) in slots.iter().enumerate() {
        layer.store(cache_type, slot, k.row(t), v.row(t));
    }
}

/// Attends every token over the cache, whose keys and values for the pass are stored, with
/// the kernels of `isa`, which this machine must have. The caller has checked the shapes and
/// block tables.
pub fn attention(
    isa: Isa,
    pool: &ThreadPool,
    q: &HostTensor,
    kv: &CpuKvStorage,
    step: &LayerPass<'_>,
) -> HostTensor {
    // The kernels below run `isa`'s instructions: an instruction set the CPU lacks must stop
    // here, not fault there.
    assert!(
        Isa::available().contains(&isa),
        "attention: this CPU has no {}",
        isa.name()
    );
    let cache_type = kv.cache_type;
    let layer = &kv.layers[step.layer];
    let shape = layer.shape;
    let n = q.n_tokens();
    let out_width = step.n_head * shape.head_dim_v;
    let mut out = vec![0.0f32; n * out_width];
    let shared = SharedOut::new(&mut out);
    let tiles = tiles(step.tokens);
    let units = tiles.len() * shape.n_head_kv;
    for_each_unit(pool, units, &|unit| {
        let unit = Unit {
            layer,
            cache_type,
            q,
            step,
            tile: tiles[unit / shape.n_head_kv].clone(),
            g: unit % shape.n_head_kv,
        };
        WORK.with_borrow_mut(|work| work.run(isa, &unit, &shared));
    });
    HostTensor::new(n, out_width, out)
}

/// One unit of work: a tile of the batch's tokens with one KV head.
struct Unit<'a> {
    layer: &'a LayerStore,
    cache_type: KvCacheType,
    q: &'a HostTensor,
    step: &'a LayerPass<'a>,
    tile: Range<usize>,
    g: usize,
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

/// One thread's buffers for attending one tile with one KV head. A row is one (token of the
/// tile, query head of the group) pair, token-major. Row-indexed buffers have `rows_pad`
/// entries per line so that every row vector is whole; padding rows see no position.
#[derive(Default)]
struct TileWork {
    rows: usize,
    /// `rows` rounded up to whole vectors.
    rows_pad: usize,
    head_dim_k: usize,
    head_dim_v: usize,
    /// `head_dim_v` rounded up to whole vectors: the line length of `values` and `out`.
    dv_pad: usize,
    /// The rows' queries, transposed: `[dim][row]`; padding rows are 0.
    queries: Vec<f32>,
    /// Per row, where its query starts in the tile's lines of `q`.
    offsets: Vec<i32>,
    /// One block's keys, `[key][dim]`.
    keys: Vec<f32>,
    /// One block's values, `[key][dim]`; the padding dimensions are 0.
    values: Vec<f32>,
    /// One block's scores, then softmax weights, `[key][row]`.
    weights: Vec<f32>,
    /// Each row's running weighted sum of values, `[row][dim]`.
    out: Vec<f32>,
    /// Per row, the positions it sees, `first..end` (f32 for vector comparisons: exact for
    /// any position below 2²⁴).
    first: Vec<f32>,
    end: Vec<f32>,
    /// Per row, the largest score so far and the sum of weights relative to it.
    max: Vec<f32>,
    sum: Vec<f32>,
    /// Per row, the factor the current block's larger maximum applies to `out` (1 if none).
    rescale: Vec<f32>,
}

impl TileWork {
    /// Attends `unit` and writes its rows to `out` (`[token][head][head_dim_v]`). The kernels
    /// are compiled inside a `#[target_feature]` function per instruction set: one layer of
    /// gemma3's 512-token prompt takes about 4 ms with AVX-512 and 8 ms with AVX2 on one Zen 5
    /// core.
    fn run(&mut self, isa: Isa, unit: &Unit<'_>, out: &SharedOut<'_, f32>) {
        // SAFETY (every arm): `attention` checked that this machine has `isa`, and each arm
        // uses only its instruction set.
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx512Vnni => unsafe { self.run_avx512(unit, out) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 | Isa::Avx2Vnni => unsafe { self.run_avx2(unit, out) },
            #[cfg(target_arch = "aarch64")]
            Isa::Neon | Isa::NeonDotprod | Isa::NeonI8mm => unsafe { self.run_neon(unit, out) },
            #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
            Isa::Simd128 => unsafe { self.run_body::<Simd128>(unit, out) },
            _ => unsafe { self.run_body::<Scalar>(unit, out) },
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
    unsafe fn run_avx512(&mut self, unit: &Unit<'_>, out: &SharedOut<'_, f32>) {
        self.run_body::<Avx512>(unit, out)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run_avx2(&mut self, unit: &Unit<'_>, out: &SharedOut<'_, f32>) {
        self.run_body::<Avx2>(unit, out)
    }

    #[cfg(target_arch = "aarch64")]
    #[target_feature(enable = "neon")]
    unsafe fn run_neon(&mut self, unit: &Unit<'_>, out: &SharedOut<'_, f32>) {
        self.run_body::<Neon>(unit, out)
    }

    /// # Safety
    ///
    /// The CPU must have `V`'s instruction set.
    #[inline(always)]
    unsafe fn run_body<V: Lanes>(&mut self, unit: &Unit<'_>, out: &SharedOut<'_, f32>) {
        let (layer, g) = (unit.layer, unit.g);
        let table = unit.step.kv.of(unit.step.tokens[unit.tile.start].seq);
        self.prepare::<V>(unit);
        let seen = |t: usize| layer.shape.visible(unit.step.tokens[t].pos);
        let first = unit.tile.clone().map(|t| seen(t).start).min().unwrap_or(0);
        let last = unit.tile.clone().map(|t| seen(t).end).max().unwrap_or(0);
        let (hd_k, hd_v, dv_pad) = (self.head_dim_k, self.head_dim_v, self.dv_pad);
        let mut block = first / BLOCK * BLOCK;
        while block < last {
            let positions = first.max(block)..last.min(block + BLOCK);
            for pos in positions.clone() {
                let (r, slot) = (pos - block, table.slot(pos));
                let keys = &mut self.keys[r * hd_k..(r + 1) * hd_k];
                decode_row::<V>(unit.cache_type, layer.k_row(slot), g * hd_k, keys);
                let values = &mut self.values[r * dv_pad..r * dv_pad + hd_v];
                decode_row::<V>(unit.cache_type, layer.v_row(slot), g * hd_v, values);
            }
            let keys = positions.start - block..positions.end - block;
            self.score::<V>(keys.clone(), unit.step.scale);
            if let Some(cap) = unit.step.softcap {
                self.softcap(keys.clone(), cap);
            }
            self.softmax::<V>(block, keys.clone());
            self.accumulate::<V>(keys);
            block += BLOCK;
        }
        self.finish(unit, out);
    }

    /// Sizes the buffers for the unit, resets the rows' softmax states and lays out their
    /// queries.
    #[inline(always)]
    unsafe fn prepare<V: Lanes>(&mut self, unit: &Unit<'_>) {
        let shape = &unit.layer.shape;
        let group = unit.step.n_head / shape.n_head_kv;
        let (hd_k, hd_v) = (shape.head_dim_k, shape.head_dim_v);
        let dv_pad = hd_v.next_multiple_of(V::N);
        if (hd_k, hd_v, dv_pad) != (self.head_dim_k, self.head_dim_v, self.dv_pad) {
            // Decoding fills only the first `hd_v` of each line: the padding must start at 0.
            self.values.clear();
            (self.head_dim_k, self.head_dim_v, self.dv_pad) = (hd_k, hd_v, dv_pad);
        }
        self.keys.resize(BLOCK * hd_k, 0.0);
        self.values.resize(BLOCK * dv_pad, 0.0);
        self.rows = unit.tile.len() * group;
        self.rows_pad = self.rows.next_multiple_of(V::N);
        let (rows, rows_pad) = (self.rows, self.rows_pad);
        self.weights.resize(BLOCK * rows_pad, 0.0);
        self.out.clear();
        self.out.resize(rows * dv_pad, 0.0);
        for (state, init) in [
            (&mut self.first, 0.0),
            (&mut self.end, 0.0),
            (&mut self.max, f32::NEG_INFINITY),
            (&mut self.sum, 0.0),
            (&mut self.rescale, 1.0),
        ] {
            state.clear();
            state.resize(rows_pad, init);
        }
        for (c, t) in unit.tile.clone().enumerate() {
            let seen = shape.visible(unit.step.tokens[t].pos);
            self.first[c * group..(c + 1) * group].fill(seen.start as f32);
            self.end[c * group..(c + 1) * group].fill(seen.end as f32);
        }
        // Row `c·group + j` is head `g·group + j` of the tile's token `c`: where each row's
        // query starts in the tile's rows of `q` (padding rows read the first, then are
        // cleared).
        let width = unit.q.row(0).len();
        let tile_q = &unit.q.data()[unit.tile.start * width..unit.tile.end * width];
        self.offsets.clear();
        for c in 0..unit.tile.len() {
            for j in 0..group {
                let offset = c * width + (unit.g * group + j) * hd_k;
                self.offsets
                    .push(i32::try_from(offset).expect("a tile's queries fit in i32"));
            }
        }
        self.offsets.resize(rows_pad, 0);
        let last_offset = self.offsets.iter().copied().max().unwrap_or(0) as usize;
        assert!(last_offset + hd_k <= tile_q.len());
        self.queries.resize(hd_k * rows_pad, 0.0);
        for (d, line) in self.queries.chunks_exact_mut(rows_pad).enumerate() {
            for (v, lanes) in line.chunks_exact_mut(V::N).enumerate() {
                let offsets = self.offsets[v * V::N..].as_ptr();
                V::gather(tile_q[d..].as_ptr(), offsets).store(lanes.as_mut_ptr());
            }
            line[rows..].fill(0.0);
        }
        // llama.cpp multiplies f16 keys by queries rounded to f16; so does this. Matching
        // that rounding, rather than keeping f32 queries, is what keeps the top-1 choices
        // where llama.cpp is sure of them.
        if unit.cache_type == KvCacheType::F16 {
            V::round_to_f16(&mut self.queries);
        }
    }

    /// `weights[key][row] = scale · query_row · key` for the block's `keys` (and the few
    /// around them that make whole groups; those are never seen).
    #[inline(always)]
    unsafe fn score<V: Lanes>(&mut self, keys: Range<usize>, scale: f32) {
        let vectors = self.rows_pad / V::N;
        let mut v0 = 0;
        while v0 < vectors {
            v0 += match (V::MANY_REGISTERS, vectors - v0) {
                (true, 4..) => self.score_rows::<V, 4, 4>(v0, keys.clone(), scale),
                (true, 3) => self.score_rows::<V, 3, 4>(v0, keys.clone(), scale),
                (true, 2) => self.score_rows::<V, 2, 8>(v0, keys.clone(), scale),
                (false, 2..) => self.score_rows::<V, 2, 4>(v0, keys.clone(), scale),
                _ => self.score_rows::<V, 1, 8>(v0, keys.clone(), scale),
            };
        }
    }

    /// [`Self::score`] for the `RV` row vectors from `v0`, `KB` keys at a time: `KB × RV`
    /// running dot products stay in registers over all dimensions. Returns `RV`.
    #[inline(always)]
    unsafe fn score_rows<V: Lanes, const RV: usize, const KB: usize>(
        &mut self,
        v0: usize,
        keys: Range<usize>,
        scale: f32,
    ) -> usize {
        let (hd, stride) = (self.head_dim_k, self.rows_pad);
        let key_groups = keys.start / KB * KB..keys.end.next_multiple_of(KB);
        assert!(key_groups.end <= BLOCK && (v0 + RV) * V::N <= stride);
        assert!(self.queries.len() >= hd * stride && self.keys.len() >= BLOCK * hd);
        assert!(self.weights.len() >= BLOCK * stride);
        let queries = self.queries.as_ptr().add(v0 * V::N);
        let weights = self.weights.as_mut_ptr().add(v0 * V::N);
        let scale = V::splat(scale);
        for k0 in key_groups.step_by(KB) {
            let key_rows = self.keys.as_ptr().add(k0 * hd);
            let mut acc = [[V::splat(0.0); RV]; KB];
            for d in 0..hd {
                let mut q = [V::splat(0.0); RV];
                for (j, q) in q.iter_mut().enumerate() {
                    *q = V::load(queries.add(d * stride + j * V::N));
                }
                for (k, acc) in acc.iter_mut().enumerate() {
                    let key = V::splat(*key_rows.add(k * hd + d));
                    for (a, &q) in acc.iter_mut().zip(&q) {
                        *a = key.mul_add(q, *a);
                    }
                }
            }
            for (k, acc) in acc.iter().enumerate() {
                for (j, a) in acc.iter().enumerate() {
                    a.mul(scale)
                        .store(weights.add((k0 + k) * stride + j * V::N));
                }
            }
        }
        RV
    }

    /// `weights[key][row] ← cap·tanh(weights[key][row]/cap)` for the block's `keys`: gemma2's
    /// capped scores, plain scalar code, as only that architecture needs it.
    fn softcap(&mut self, keys: Range<usize>, cap: f32) {
        let stride = self.rows_pad;
        for w in &mut self.weights[keys.start * stride..keys.end * stride] {
            *w = cap * (*w / cap).tanh();
        }
    }

    /// Takes the block's scores of `keys` (positions `block + key`) into every row's online
    /// softmax, leaving the weights in their place: `e^(score − max)` where the row sees the
    /// position, 0 where it does not.
    #[inline(always)]
    unsafe fn softmax<V: Lanes>(&mut self, block: usize, keys: Range<usize>) {
        let stride = self.rows_pad;
        assert!(keys.end <= BLOCK && self.weights.len() >= BLOCK * stride);
        let weights = self.weights.as_mut_ptr();
        let neg_inf = V::splat(f32::NEG_INFINITY);
        let zero = V::splat(0.0);
        for at in (0..stride).step_by(V::N) {
            let first = V::load(self.first[at..].as_ptr());
            let end = V::load(self.end[at..].as_ptr());
            let old_max = V::load(self.max[at..].as_ptr());
            let mut block_max = neg_inf;
            for r in keys.clone() {
                let seen = V::splat((block + r) as f32).in_range(first, end);
                let score = V::load(weights.add(r * stride + at));
                block_max = block_max.max(V::select(seen, score, neg_inf));
            }
            let max = old_max.max(block_max);
            // Equal maxima (including a row that has seen nothing yet, −∞) keep the sums.
            let rescale = V::select(old_max.equal(max), V::splat(1.0), old_max.sub(max).exp());
            let mut sum = V::load(self.sum[at..].as_ptr()).mul(rescale);
            for r in keys.clone() {
                let seen = V::splat((block + r) as f32).in_range(first, end);
                let at_r = weights.add(r * stride + at);
                let weight = V::select(seen, V::load(at_r).sub(max).exp(), zero);
                weight.store(at_r);
                sum = sum.add(weight);
            }
            max.store(self.max[at..].as_mut_ptr());
            sum.store(self.sum[at..].as_mut_ptr());
            rescale.store(self.rescale[at..].as_mut_ptr());
        }
    }

    /// `out[row] ← rescale[row] · out[row] + Σ_key weights[key][row] · values[key]`.
    #[inline(always)]
    unsafe fn accumulate<V: Lanes>(&mut self, keys: Range<usize>) {
        let chunks = self.dv_pad / V::N;
        let mut c0 = 0;
        while c0 < chunks {
            c0 += match (V::MANY_REGISTERS, chunks - c0) {
                (true, 4..) => self.accumulate_chunk::<V, 4>(c0, keys.clone()),
                (false, 2..) => self.accumulate_chunk::<V, 2>(c0, keys.clone()),
                _ => self.accumulate_chunk::<V, 1>(c0, keys.clone()),
            };
        }
    }

    /// [`Self::accumulate`] for the `CW` vectors of output dimensions from vector `c0`, every
    /// row. Returns `CW`.
    #[inline(always)]
    unsafe fn accumulate_chunk<V: Lanes, const CW: usize>(
        &mut self,
        c0: usize,
        keys: Range<usize>,
    ) -> usize {
        let mut r0 = 0;
        while r0 < self.rows {
            r0 += match self.rows - r0 {
                4.. => self.accumulate_rows::<V, 4, CW>(r0, c0, keys.clone()),
                3 => self.accumulate_rows::<V, 3, CW>(r0, c0, keys.clone()),
                2 => self.accumulate_rows::<V, 2, CW>(r0, c0, keys.clone()),
                _ => self.accumulate_rows::<V, 1, CW>(r0, c0, keys.clone()),
            };
        }
        CW
    }

    /// [`Self::accumulate`] for rows `r0..r0 + RB` and `CW` vectors of output dimensions:
    /// `RB × CW` vectors of sums stay in registers over all the block's keys. Returns `RB`.
    #[inline(always)]
    unsafe fn accumulate_rows<V: Lanes, const RB: usize, const CW: usize>(
        &mut self,
        r0: usize,
        c0: usize,
        keys: Range<usize>,
    ) -> usize {
        let (stride, dv) = (self.rows_pad, self.dv_pad);
        assert!(r0 + RB <= self.rows && (c0 + CW) * V::N <= dv && keys.end <= BLOCK);
        assert!(self.out.len() >= self.rows * dv && self.values.len() >= BLOCK * dv);
        assert!(self.weights.len() >= BLOCK * stride);
        let out = self.out.as_mut_ptr().add(r0 * dv + c0 * V::N);
        let values = self.values.as_ptr().add(c0 * V::N);
        let weights = self.weights.as_ptr().add(r0);
        let mut acc = [[V::splat(0.0); CW]; RB];
        for (j, acc) in acc.iter_mut().enumerate() {
            let rescale = V::splat(self.rescale[r0 + j]);
            for (c, a) in acc.iter_mut().enumerate() {
                *a = V::load(out.add(j * dv + c * V::N)).mul(rescale);
            }
        }
        for r in keys {
            let mut v = [V::splat(0.0); CW];
            for (c, v) in v.iter_mut().enumerate() {
                *v = V::load(values.add(r * dv + c * V::N));
            }
            for (j, acc) in acc.iter_mut().enumerate() {
                let weight = V::splat(*weights.add(r * stride + j));
                for (a, &v) in acc.iter_mut().zip(&v) {
                    *a = weight.mul_add(v, *a);
                }
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            for (c, a) in acc.iter().enumerate() {
                a.store(out.add(j * dv + c * V::N));
            }
        }
        RB
    }

    /// Writes every row's attention output, its weighted sum over its sum of weights, to
    /// its place in `out`.
    #[inline(always)]
    fn finish(&self, unit: &Unit<'_>, out: &SharedOut<'_, f32>) {
        let (hd_v, group) = (self.head_dim_v, self.rows / unit.tile.len());
        let out_width = unit.step.n_head * hd_v;
        for (row, acc) in self.out.chunks_exact(self.dv_pad).enumerate() {
            let (t, h) = (unit.tile.start + row / group, unit.g * group + row % group);
            // SAFETY: head h of token t belongs to whichever thread runs this unit.
            let dst = unsafe { out.slice(t * out_width + h * hd_v, hd_v) };
            let inv = 1.0 / self.sum[row];
            for (o, a) in dst.iter_mut().zip(acc) {
                *o = a * inv;
            }
        }
    }
}

/// Decodes `out.len()` values from element `start` of a cached row; f16 with `V`'s own
/// conversion.
#[inline(always)]
unsafe fn decode_row<V: Lanes>(cache_type: KvCacheType, row: &[u8], start: usize, out: &mut [f32]) {
    if cache_type == KvCacheType::F16 {
        let halves: &[f16] = bytemuck::cast_slice(row);
        V::widen_f16(&halves[start..start + out.len()], out);
    } else {
        decode(cache_type, row, start, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_model::{BlockTables, KvConfig, KvLayout, LayerKv};

    /// xorshift64*: reproducible inputs without a dependency.
    struct Rng(u64);

    impl Rng {
        /// Uniform in [−1, 1).
        fn next(&mut self) -> f32 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let bits = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40;
            bits as f32 / (1u64 << 23) as f32 - 1.0
        }

        fn rows(&mut self, n: usize, width: usize) -> Vec<Vec<f32>> {
            (0..n)
                .map(|_| (0..width).map(|_| self.next()).collect())
                .collect()
        }
    }

    struct Case {
        head_dim: usize,
        n_head_kv: usize,
        group: usize,
        window: Option<usize>,
        cache_type: KvCacheType,
    }

    /// softmax(scale · q·k) · v in f64 over the positions `place` sees, from the keys and
    /// values as the cache holds them now, with the query rounded as the kernel rounds it.
    fn plain_attention(
        case: &Case,
        store: &LayerStore,
        slot_of: impl Fn(&TokenPos) -> usize,
        place: TokenPos,
        q: &[f32],
        scale: f32,
    ) -> Vec<f64> {
        let hd = case.head_dim;
        let mut out = Vec::new();
        for h in 0..case.n_head_kv * case.group {
            let g = h / case.group;
            let mut query = q[h * hd..(h + 1) * hd].to_vec();
            if case.cache_type == KvCacheType::F16 {
                for x in &mut query {
                    *x = f16::from_f32(*x).to_f32();
                }
            }
            let mut key = vec![0.0; hd];
            let mut value = vec![0.0; hd];
            let mut scores = Vec::new();
            let mut values = Vec::new();
            for pos in store.shape.visible(place.pos) {
                let slot = slot_of(&TokenPos {
                    seq: place.seq,
                    pos,
                });
                decode(case.cache_type, store.k_row(slot), g * hd, &mut key);
                decode(case.cache_type, store.v_row(slot), g * hd, &mut value);
                let dot: f64 = query
                    .iter()
                    .zip(&key)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                scores.push(f64::from(scale) * dot);
                values.push(value.clone());
            }
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            for d in 0..hd {
                let sum: f64 = weights
                    .iter()
                    .zip(&values)
                    .map(|(w, v)| w * f64::from(v[d]))
                    .sum();
                out.push(sum / total);
            }
        }
        out
    }

    /// Attends the same `n_pos` random tokens in sequence 0 as one batch and in sequence 1 in
    /// the batches `splits` (the last batch also carrying a token of sequence 0's future, so
    /// that tiles of both sequences share a call), their blocks of 8 positions scattered over
    /// the storage in a shuffled order. Every output must match the plain computation, and
    /// the two sequences' outputs must be equal bit for bit.
    fn check(isa: Isa, case: &Case, n_pos: usize, splits: &[usize]) {
        let hd = case.head_dim;
        let n_head = case.n_head_kv * case.group;
        // Large enough that scores spread over several units and the running maximum moves.
        let scale = 8.0 / (hd as f32).sqrt();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (hd * 31 + case.group) as u64);
        let q = rng.rows(n_pos + 1, n_head * hd);
        let k = rng.rows(n_pos + 1, case.n_head_kv * hd);
        let v = rng.rows(n_pos + 1, case.n_head_kv * hd);
        let config = KvConfig::new(n_pos + 1, 2, n_pos + 1).with_block_size(8);
        let per_seq = (n_pos + 1).div_ceil(config.block_size);
        let shape = LayerKv::new(case.n_head_kv, hd, hd, case.window);
        let layout = KvLayout::new(&config, vec![shape]);
        let mut kv = CpuKvStorage::new(&layout, case.cache_type);
        // Fisher–Yates over the blocks; sequence s takes blocks[s·per_seq..].
        let mut blocks: Vec<u32> = (0..config.n_blocks as u32).collect();
        for i in (1..blocks.len()).rev() {
            let j = ((rng.next() + 1.0) / 2.0 * (i + 1) as f32) as usize;
            blocks.swap(i, j.min(i));
        }
        let tables: Vec<Vec<u32>> = blocks.chunks(per_seq).map(<[u32]>::to_vec).collect();
        let slot_of = |t: &TokenPos| {
            tables[t.seq][t.pos / config.block_size] as usize * config.block_size
                + t.pos % config.block_size
        };
        let pool = ThreadPool::new(3).unwrap();
        let mut outputs = vec![vec![Vec::new(); n_pos + 1]; 2];
        let mut batches: Vec<Vec<TokenPos>> =
            vec![(0..n_pos).map(|pos| TokenPos { seq: 0, pos }).collect()];
        let mut next = 0;
        for &len in splits {
            batches.push(
                (next..next + len)
                    .map(|pos| TokenPos { seq: 1, pos })
                    .collect(),
            );
            next += len;
        }
        assert_eq!(next, n_pos, "splits must cover the positions");
        batches
            .last_mut()
            .unwrap()
            .push(TokenPos { seq: 0, pos: n_pos });
        for tokens in &batches {
            let rows = |all: &[Vec<f32>]| {
                let width = all[0].len();
                let data = tokens.iter().flat_map(|t| all[t.pos].clone()).collect();
                HostTensor::new(tokens.len(), width, data)
            };
            let slots: Vec<usize> = tokens.iter().map(slot_of).collect();
            let step = LayerPass {
                layer: 0,
                tokens,
                n_head,
                scale,
                softcap: None,
                kv: BlockTables::new(config.block_size, &slots, &tables),
            };
            let (q_batch, k_batch, v_batch) = (rows(&q), rows(&k), rows(&v));
            store_kv(&k_batch, &v_batch, &mut kv, 0, &slots);
            let out = attention(isa, &pool, &q_batch, &kv, &step);
            for (t, &place) in tokens.iter().enumerate() {
                // Read through the test's own slot formula, not the tables the kernel reads.
                let want =
                    plain_attention(case, &kv.layers[0], slot_of, place, &q[place.pos], scale);
                for (i, (&got, &want)) in out.row(t).iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(got) - want).abs() < 1e-5,
                        "{isa:?}, {} cache, head dim {hd}, group {}: seq {} pos {} head {} \
                         dim {}: {got} vs {want}",
                        case.cache_type.name(),
                        case.group,
                        place.seq,
                        place.pos,
                        i / hd,
                        i % hd
                    );
                }
                outputs[place.seq][place.pos] = out.row(t).to_vec();
            }
        }
        let (whole, split) = (&outputs[0][..n_pos], &outputs[1][..n_pos]);
        for (pos, (a, b)) in whole.iter().zip(split).enumerate() {
            assert!(
                a == b,
                "position {pos}: the result depends on how the batch was split"
            );
        }
    }

    #[test]
    fn blocked_attention_matches_a_plain_softmax() {
        let case = |head_dim, n_head_kv, group, window, cache_type| Case {
            head_dim,
            n_head_kv,
            group,
            window,
            cache_type,
        };
        use KvCacheType::*;
        let cases = [
            (case(64, 2, 7, None, F32), 75, &[1, 20, 3, 51][..]),
            (case(64, 2, 7, None, F16), 75, &[17, 1, 1, 56]),
            (case(64, 2, 7, Some(20), Q8_0), 75, &[40, 35]),
            (case(256, 1, 4, Some(45), F16), 70, &[33, 2, 35]),
            (case(256, 1, 1, None, F32), 40, &[16, 24]),
            (case(40, 3, 3, Some(7), F32), 50, &[5, 45]),
            (case(40, 1, 2, None, F16), 50, &[50]),
        ];
        for isa in Isa::available() {
            for (case, n_pos, splits) in &cases {
                check(isa, case, *n_pos, splits);
            }
        }
    }
}
