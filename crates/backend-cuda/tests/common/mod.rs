//! What the CUDA backend's tests share: the backend or a loud skip where there is no GPU,
//! host weights on both backends, random inputs and comparisons.

#![allow(dead_code)] // each test file uses a different part

#[path = "../../../backend-ref/tests/common/mod.rs"]
pub mod synthetic;

use std::sync::Arc;

use plumb_backend_cuda::{CudaBackend, CudaTensor};
use plumb_backend_ref::{HostTensor, RefBackend};
use plumb_gguf::{GgmlType, GgufWriter};
use plumb_model::{
    Activations, Backend, KvCache, KvConfig, KvLayout, LayerKv, PassInputs, Result, TokenPos,
    WeightTensor, WeightUse,
};

/// The backend on device 0, or `None` after a loud `SKIPPED` notice where this machine has
/// no CUDA driver or device. A device that is present but fails to start fails the test.
pub fn cuda(test: &str) -> Option<CudaBackend> {
    match CudaBackend::device_count() {
        Ok(n) if n > 0 => Some(CudaBackend::new(0).expect("a CUDA device is present")),
        Ok(_) => {
            plumb_testutil::skip(test, "no CUDA device (the driver reports none)");
            None
        }
        Err(e) => {
            plumb_testutil::skip(test, &format!("no CUDA device ({e})"));
            None
        }
    }
}

/// `let cuda = require_cuda!();` returns from the test, loudly, without a CUDA device.
#[macro_export]
macro_rules! require_cuda {
    () => {
        match common::cuda(module_path!()) {
            Some(backend) => backend,
            None => return,
        }
    };
}

use plumb_testutil::Rng;

/// The same random activations on both backends.
pub fn tensors(
    cuda: &CudaBackend,
    rng: &mut Rng,
    n_tokens: usize,
    width: usize,
) -> (HostTensor, CudaTensor) {
    let values = rng.values(n_tokens * width, 1.0);
    let device = cuda.upload(n_tokens, width, values.clone()).unwrap();
    (HostTensor::new(n_tokens, width, values), device)
}

/// A weight of GGUF shape `shape` holding `values` (quantized to `ty`), loaded by both
/// backends: a vector if it has one dimension, else a matrix.
pub fn weight(
    cuda: &CudaBackend,
    name: &str,
    ty: GgmlType,
    shape: &[usize],
    values: &[f32],
) -> (WeightTensor, plumb_backend_cuda::CudaWeight) {
    let mut w = GgufWriter::new();
    let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    if ty == GgmlType::F32 {
        w.add_f32(name, &dims, values).unwrap();
    } else {
        let bytes = plumb_ggml::quantize_row_to_vec(ty, values).unwrap();
        w.add_tensor(name, ty, &dims, bytes).unwrap();
    }
    let file = synthetic::file_of(&w);
    let info = file.tensor_info(name).unwrap().clone();
    let tensor = WeightTensor::new(Arc::clone(&file), info);
    let usage = if shape.len() == 1 {
        WeightUse::Vector
    } else {
        WeightUse::Matrix
    };
    let device = cuda.load_weight(tensor.clone(), usage).unwrap();
    (tensor, device)
}

/// Fails unless the device result is within `tol` of the reference's (max |a − b| relative
/// to max |b|), naming `what`.
pub fn assert_close(cuda: &CudaBackend, got: &CudaTensor, want: &HostTensor, tol: f32, what: &str) {
    assert_eq!(
        (got.n_tokens(), got.width()),
        (want.n_tokens(), want.width()),
        "{what}: shape"
    );
    let got = cuda.to_host(got).unwrap();
    let diff = synthetic::max_rel_diff(&got, want.data());
    assert!(
        diff <= tol,
        "{what}: relative difference {diff:e} > {tol:e}"
    );
}

pub const REF: RefBackend = RefBackend;

/// A KV cache of `layers` on `backend`, for the ops that take a pass.
pub fn kv_cache<B: Backend>(backend: &B, config: KvConfig, layers: Vec<LayerKv>) -> KvCache<B> {
    let layout = KvLayout::new(&config, layers);
    let storage = backend.new_kv_storage(&layout).unwrap();
    KvCache::new(layout, storage)
}

/// Runs `ops` in one pass of `tokens` at `places` over `cache`, as a model's forward pass
/// would, with `output_rows` as the rows whose logits are wanted.
pub fn with_pass<B: Backend, R>(
    backend: &B,
    cache: &mut KvCache<B>,
    tokens: &[u32],
    places: &[TokenPos],
    output_rows: &[usize],
    ops: impl for<'p> FnOnce(&B::Pass<'p>, &mut B::KvStorage) -> Result<R>,
) -> Result<R> {
    cache.run_pass(backend, tokens, places, |storage, kv| {
        let inputs = PassInputs::new(tokens, places, output_rows, kv);
        let pass = backend.begin_pass(&inputs)?;
        ops(&pass, storage)
    })
}

/// Positions `from..to` of sequence `seq`.
pub fn run(seq: usize, from: usize, to: usize) -> Vec<TokenPos> {
    (from..to).map(|pos| TokenPos { seq, pos }).collect()
}

/// A cache with no layers, for passes of ops that use no KV (embed, rope, output_rows):
/// one sequence of up to `n_ctx` positions.
pub fn no_kv<B: Backend>(backend: &B, n_ctx: usize) -> KvCache<B> {
    kv_cache(backend, KvConfig::new(n_ctx, 1, n_ctx), Vec::new())
}
