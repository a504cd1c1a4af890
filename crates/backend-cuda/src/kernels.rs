//! The backend's own kernels (everything but the matrix products), loaded once per backend.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, LaunchConfig};
use plumb_model::Result;

use crate::error::failed;
use crate::nvrtc::load_module;

const F16: &str = include_str!("kernels/f16.cuh");

/// Each kernel source file, by the name its module and cache entries get.
pub(crate) fn sources() -> [(&'static str, String); 5] {
    [
        ("elementwise", include_str!("kernels/elementwise.cu").into()),
        ("rms_norm", include_str!("kernels/rms_norm.cu").into()),
        ("rope", include_str!("kernels/rope.cu").into()),
        ("kv", format!("{F16}{}", include_str!("kernels/kv.cu"))),
        (
            "attention",
            format!("{F16}{}", include_str!("kernels/attention.cu")),
        ),
    ]
}

pub(crate) struct Kernels {
    pub add: CudaFunction,
    pub add_bias: CudaFunction,
    pub scale: CudaFunction,
    pub gated_silu: CudaFunction,
    pub gated_gelu_tanh: CudaFunction,
    pub select_rows: CudaFunction,
    pub rms_norm: CudaFunction,
    pub rope: CudaFunction,
    pub store_kv: CudaFunction,
    pub copy_within: CudaFunction,
    pub attention_partial: CudaFunction,
    pub attention_combine: CudaFunction,
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let [elementwise, rms_norm, rope, kv, attention] =
            sources().map(|(name, source)| load_module(ctx, name, &source));
        let (elementwise, rms_norm, rope, kv, attention) =
            (elementwise?, rms_norm?, rope?, kv?, attention?);
        let f = |module: &Arc<cudarc::driver::CudaModule>, name: &str| {
            module.load_function(name).map_err(failed("load_module"))
        };
        Ok(Kernels {
            add: f(&elementwise, "add")?,
            add_bias: f(&elementwise, "add_bias")?,
            scale: f(&elementwise, "scale")?,
            gated_silu: f(&elementwise, "gated_silu")?,
            gated_gelu_tanh: f(&elementwise, "gated_gelu_tanh")?,
            select_rows: f(&elementwise, "select_rows")?,
            rms_norm: f(&rms_norm, "rms_norm")?,
            rope: f(&rope, "rope")?,
            store_kv: f(&kv, "store_kv")?,
            copy_within: f(&kv, "copy_within")?,
            attention_partial: f(&attention, "attention_partial")?,
            attention_combine: f(&attention, "attention_combine")?,
        })
    }
}

/// A grid for a grid-stride loop over `n` elements: enough blocks to cover them, capped
/// where more would only queue.
pub(crate) fn grid_stride(n: usize) -> LaunchConfig {
    const THREADS: usize = 256;
    const MAX_BLOCKS: usize = 1 << 16;
    LaunchConfig {
        grid_dim: (n.div_ceil(THREADS).clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}
