//! The KV cache storage and causal attention over it.

use plumb_model::{Activations, AttentionStep, BlockCopy, KvLayout, LayerKv, PassInputs};
use rayon::prelude::*;

use crate::matmul::dot;
use crate::tensor::HostTensor;

/// Keys and values in f32 (llama.cpp rounds them to f16; the reference does not).
pub struct RefKvStorage {
    layers: Vec<LayerStore>,
}

/// One layer: `n_slots` slots of one K row and one V row each.
struct LayerStore {
    shape: LayerKv,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl RefKvStorage {
    pub fn new(layout: &KvLayout) -> Self {
        let layers = layout
            .layers
            .iter()
            .map(|shape| LayerStore {
                shape: *shape,
                k: vec![0.0; shape.n_slots * shape.k_width()],
                v: vec![0.0; shape.n_slots * shape.v_width()],
            })
            .collect();
        RefKvStorage { layers }
    }

    /// Every layer's shape, in order: what the checks take.
    pub fn layer_shapes(&self) -> Vec<&LayerKv> {
        self.layers.iter().map(|l| &l.shape).collect()
    }

    /// Makes checked block copies, in order.
    pub fn copy_blocks(&mut self, copies: &[BlockCopy]) {
        for c in copies {
            for layer in self.layers.iter_mut().filter(|l| l.shape.group == c.group) {
                let (kw, vw) = (layer.shape.k_width(), layer.shape.v_width());
                layer
                    .k
                    .copy_within(c.src * kw..(c.src + c.len) * kw, c.dst * kw);
                layer
                    .v
                    .copy_within(c.src * vw..(c.src + c.len) * vw, c.dst * vw);
            }
        }
    }
}

impl LayerStore {
    fn k_row(&self, slot: usize) -> &[f32] {
        let w = self.shape.k_width();
        &self.k[slot * w..(slot + 1) * w]
    }

    fn v_row(&self, slot: usize) -> &[f32] {
        let w = self.shape.v_width();
        &self.v[slot * w..(slot + 1) * w]
    }

    fn store(&mut self, slot: usize, k: &[f32], v: &[f32]) {
        let (kw, vw) = (self.shape.k_width(), self.shape.v_width());
        self.k[slot * kw..(slot + 1) * kw].copy_from_slice(k);
        self.v[slot * vw..(slot + 1) * vw].copy_from_slice(v);
    }
}

/// Stores the batch's keys and values of layer `layer` in their slots. The caller has checked
/// the shapes and slots.
pub fn store_kv(
    k: &HostTensor,
    v: &HostTensor,
    kv: &mut RefKvStorage,
    layer: usize,
    pass: &PassInputs<'_>,
) {
    let store = &mut kv.layers[layer];
    for (t, &slot) in pass.kv.layer(layer).slots.iter().enumerate() {
        store.store(slot, k.row(t), v.row(t));
    }
}

/// Computes, for each token and query head, `softmax(scale · q·Kᵀ) · V` over the positions
/// the token sees, the scaled scores soft-capped first where the step says so. The caller has checked the shapes and block tables.
pub fn attention(
    q: &HostTensor,
    kv: &RefKvStorage,
    step: &AttentionStep,
    pass: &PassInputs<'_>,
) -> HostTensor {
    let layer = &kv.layers[step.layer];
    let tables = pass.kv.layer(step.layer);
    let (hd_k, hd_v) = (layer.shape.head_dim_k, layer.shape.head_dim_v);
    let group = step.n_head / layer.shape.n_head_kv;

    let mut out = HostTensor::zeros(q.n_tokens(), step.n_head * hd_v);
    let out_width = out.width();
    out.data_mut()
        .par_chunks_mut(out_width)
        .enumerate()
        .for_each(|(t, out_row)| {
            let place = pass.places[t];
            let table = tables.of(place.seq);
            let visible = layer.shape.visible(place.pos);
            let mut weights = vec![0.0f32; visible.len()];
            for h in 0..step.n_head {
                let kv_head = h / group;
                let q_h = &q.row(t)[h * hd_k..(h + 1) * hd_k];
                for (w, pos) in weights.iter_mut().zip(visible.clone()) {
                    let k_h = &layer.k_row(table.slot(pos))[kv_head * hd_k..(kv_head + 1) * hd_k];
                    *w = step.scale * dot(q_h, k_h);
                }
                if let Some(cap) = step.softcap {
                    softcap(&mut weights, cap);
                }
                softmax(&mut weights);
                let out_h = &mut out_row[h * hd_v..(h + 1) * hd_v];
                for (&w, pos) in weights.iter().zip(visible.clone()) {
                    let v_h = &layer.v_row(table.slot(pos))[kv_head * hd_v..(kv_head + 1) * hd_v];
                    for (o, &x) in out_h.iter_mut().zip(v_h) {
                        *o += w * x;
                    }
                }
            }
        });
    out
}

/// `cap·tanh(x/cap)`, in f64 and rounded once.
fn softcap(x: &mut [f32], cap: f32) {
    let cap = f64::from(cap);
    for v in x {
        *v = (cap * (f64::from(*v) / cap).tanh()) as f32;
    }
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += f64::from(*v);
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}
