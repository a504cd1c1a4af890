//! What the kernel tests share: the device (or a loud skip), seeded random values, weight
//! tensors of any type, and a pass's inputs without a model.

#![allow(dead_code)] // each test file uses a different part

use std::sync::Arc;

use plumb_backend_wgpu::WgpuBackend;
use plumb_gguf::{GgmlType, GgufFile, GgufWriter};
use plumb_model::{Backend, KvLayout, PassInputs, PassKv, TokenPos, WeightTensor, WeightUse};

/// The wgpu backend, or `None` after a loud skip when no adapter can be opened.
pub fn gpu(test: &str) -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(backend) => Some(backend),
        Err(e) => {
            plumb_testutil::skip(
                test,
                &format!(
                    "no GPU adapter ({e}); CI runs these tests on Mesa's lavapipe \
                     (mesa-vulkan-drivers)"
                ),
            );
            None
        }
    }
}

/// `let gpu = require_gpu!();` returns from the test, loudly, without an adapter.
#[macro_export]
macro_rules! require_gpu {
    () => {
        match common::gpu(module_path!()) {
            Some(b) => b,
            None => return,
        }
    };
}

/// A `[row_len, n_rows]` tensor of `ty` holding `values` quantized by ggml's reference
/// quantizer.
pub fn weight(ty: GgmlType, row_len: usize, n_rows: usize, values: &[f32]) -> WeightTensor {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "test");
    let bytes = plumb_ggml::quantize_row_to_vec(ty, values).unwrap();
    w.add_tensor("w", ty, &[row_len as u64, n_rows as u64], bytes)
        .unwrap();
    let file = Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap());
    let info = file.tensor_info("w").unwrap().clone();
    WeightTensor::new(file, info)
}

/// A vector weight (a norm's weight, a bias) in F32.
pub fn vector(values: &[f32]) -> WeightTensor {
    weight(GgmlType::F32, values.len(), 1, values)
}

/// Loads `tensor` on `backend` as `usage`.
pub fn load<B: Backend>(backend: &B, tensor: &WeightTensor, usage: WeightUse) -> B::Weight {
    backend.load_weight(tensor.clone(), usage).unwrap()
}

/// Host values on `backend` and back.
pub fn host<B: Backend>(backend: &B, x: &B::Tensor) -> Vec<f32> {
    backend.to_host(x).unwrap()
}

/// max |a − b| / max |b|; NaN where either holds a NaN, so that no bound passes it (f32's
/// `max` would drop it).
pub fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    if a.iter().chain(b).any(|v| v.is_nan()) {
        return f32::NAN;
    }
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    diff / scale.max(f32::MIN_POSITIVE)
}

/// A batch of tokens with their places, and a KV cache's block tables: what a pass's inputs
/// borrow.
pub struct Batch {
    pub tokens: Vec<u32>,
    pub places: Vec<TokenPos>,
    pub output_rows: Vec<usize>,
    /// Per group, per sequence, the block table.
    pub tables: Vec<Vec<Vec<u32>>>,
}

impl Batch {
    /// The batch's pass inputs over `layout`: each token writes the slot its sequence's
    /// block table gives its position.
    pub fn inputs<'a>(&'a self, layout: &'a KvLayout) -> PassInputs<'a> {
        let bs = layout.block_size;
        let slots = self
            .tables
            .iter()
            .map(|tables| {
                self.places
                    .iter()
                    .map(|p| tables[p.seq][p.pos / bs] as usize * bs + p.pos % bs)
                    .collect()
            })
            .collect();
        let tables = self.tables.iter().map(Vec::as_slice).collect();
        PassInputs::new(
            &self.tokens,
            &self.places,
            &self.output_rows,
            PassKv::new(layout, slots, tables),
        )
    }
}

/// `x` as the unit kernels multiply it (`WgpuBackend::quantizes_activations`): each 16 values
/// from the start a block of bytes q = round(v · 127 / amax), ties to even, times amax / 127.
/// Rows whose length is a multiple of 16 start blocks of their own.
pub fn quantized_x16(x: &[f32]) -> Vec<f32> {
    x.chunks(16)
        .flat_map(|block| {
            let amax = block.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let inv = if amax > 0.0 { 127.0 / amax } else { 0.0 };
            let d = amax / 127.0;
            block.iter().map(move |&v| {
                // v · inv rounded to an integer by the addition of 1.5 · 2^23, whose unit in
                // the last place is 1, in one fused step: as the kernel rounds it.
                let q = v.mul_add(inv, 12_582_912.0).to_bits() as i32 - 0x4B40_0000;
                q as f32 * d
            })
        })
        .collect()
}

/// `x` as `backend` multiplies it by a weight of `ty` in a product of `n_tokens` tokens.
pub fn as_multiplied(backend: &WgpuBackend, ty: GgmlType, n_tokens: usize, x: &[f32]) -> Vec<f32> {
    if backend.quantizes_activations(ty, n_tokens) {
        quantized_x16(x)
    } else {
        x.to_vec()
    }
}
