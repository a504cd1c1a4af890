//! Causal attention over the KV cache with an online softmax.
//!
//! Each (token, KV head) pair is one unit of work, owned by one thread: its query heads walk
//! the visible positions in blocks, decoding each block of keys and values from the cache type
//! once for the whole group of query heads that share them. The softmax is computed online
//! (running maximum and sum, rescaled as larger scores arrive), so a long prompt needs no
//! score matrix and each block is visited once.

use plumb_backend_ref::HostTensor;
use plumb_model::{Activations, AttentionStep};
use wide::f32x8;

use crate::kv_storage::{decode, CpuKvStorage};
use crate::pool::{split, ThreadPool};
use crate::shared_out::SharedOut;

/// Positions decoded and scored together.
const BLOCK: usize = 32;

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
    let (hd_k, hd_v, n_kv) = (shape.head_dim_k, shape.head_dim_v, shape.n_head_kv);
    let group = step.n_head / n_kv;

    let n = q.n_tokens();
    let out_width = step.n_head * hd_v;
    let mut out = vec![0.0f32; n * out_width];
    let shared = SharedOut::new(&mut out);
    let units = n * n_kv;
    pool.run(&|i| {
        let mut keys = vec![0.0f32; BLOCK * hd_k];
        let mut values = vec![0.0f32; BLOCK * hd_v];
        let mut scores = [0.0f32; BLOCK];
        let mut heads: Vec<HeadState> = (0..group).map(|_| HeadState::new(hd_v)).collect();
        for unit in split(units, i, pool.n_threads(), 1) {
            let (t, g) = (unit / n_kv, unit % n_kv);
            let place = step.tokens[t];
            for state in heads.iter_mut() {
                state.reset();
            }
            let visible = shape.visible(place.pos);
            let mut p0 = visible.start;
            while p0 < visible.end {
                let block = p0..(p0 + BLOCK).min(visible.end);
                let len = block.len();
                for (r, pos) in block.clone().enumerate() {
                    let k_row = layer.k_row(place.seq, pos);
                    decode(
                        cache_type,
                        k_row,
                        g * hd_k,
                        &mut keys[r * hd_k..(r + 1) * hd_k],
                    );
                    let v_row = layer.v_row(place.seq, pos);
                    decode(
                        cache_type,
                        v_row,
                        g * hd_v,
                        &mut values[r * hd_v..(r + 1) * hd_v],
                    );
                }
                for (j, state) in heads.iter_mut().enumerate() {
                    let h = g * group + j;
                    let q_h = &q.row(t)[h * hd_k..(h + 1) * hd_k];
                    for (s, key) in scores[..len].iter_mut().zip(keys.chunks_exact(hd_k)) {
                        *s = step.scale * dot(q_h, key);
                    }
                    state.absorb(&scores[..len], &values[..len * hd_v]);
                }
                p0 = block.end;
            }
            for (j, state) in heads.iter().enumerate() {
                let h = g * group + j;
                // SAFETY: head h of token t belongs to the thread owning unit (t, g).
                let dst = unsafe { shared.slice(t * out_width + h * hd_v, hd_v) };
                state.finish(dst);
            }
        }
    });
    HostTensor::new(n, out_width, out)
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
    fn absorb(&mut self, scores: &[f32], values: &[f32]) {
        let block_max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if block_max > self.max {
            let rescale = (self.max - block_max).exp();
            self.sum *= rescale;
            for a in self.acc.iter_mut() {
                *a *= rescale;
            }
            self.max = block_max;
        }
        let hd = self.acc.len();
        for (&s, value) in scores.iter().zip(values.chunks_exact(hd)) {
            let w = (s - self.max).exp();
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
