//! The backend's own kernels (everything but the matrix products), loaded once per backend.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig};
use plumb_model::Result;

use crate::attention::{DECODE_HEADS, DECODE_HEAD_DIMS, PREFILL_HEAD_DIMS, SPLIT_THREADS};
use crate::error::failed;
use crate::launch::Launch;
use crate::nvrtc::load_module;

const F16: &str = include_str!("kernels/f16.cuh");
/// The f16 helpers and the positions a token sees in the paged cache: the attention kernels'.
const PAGED: &str = concat!(
    include_str!("kernels/f16.cuh"),
    include_str!("kernels/paged.cuh")
);
/// `PAGED` and the asynchronous copies into shared memory: the kernels that stage key and
/// value rows in shared memory.
const PAGED_STAGED: &str = concat!(
    include_str!("kernels/f16.cuh"),
    include_str!("kernels/paged.cuh"),
    include_str!("kernels/copy_async.cuh")
);
/// The 8-bit activation quantizer's steps and the norms built on them: the kernels that
/// quantize the rows they write.
const NORM_Q8: &str = concat!(
    include_str!("kernels/quantize_q8.cuh"),
    include_str!("kernels/norm_q8.cuh")
);
/// The f16 helpers and `NORM_Q8`: the fused kernels'.
const FUSED: &str = concat!(
    include_str!("kernels/f16.cuh"),
    include_str!("kernels/quantize_q8.cuh"),
    include_str!("kernels/norm_q8.cuh")
);
/// What every kernel source starts with: the programmatic dependent launch calls.
pub(crate) const PDL: &str = include_str!("kernels/pdl.cuh");

/// Each kernel source file, by the name its module and cache entries get, after the PDL
/// calls and the headers it includes (the f16 helpers, the paged cache's positions, the
/// asynchronous copies, the tensor-core fragments).
pub(crate) fn sources() -> [(&'static str, String); 9] {
    [
        ("elementwise", "", include_str!("kernels/elementwise.cu")),
        ("rms_norm", NORM_Q8, include_str!("kernels/rms_norm.cu")),
        ("rope", "", include_str!("kernels/rope.cu")),
        ("kv", F16, include_str!("kernels/kv.cu")),
        ("attention", PAGED, include_str!("kernels/attention.cu")),
        (
            "attention_decode",
            PAGED_STAGED,
            include_str!("kernels/attention_decode.cu"),
        ),
        (
            "attention_prefill",
            concat!(
                include_str!("kernels/f16.cuh"),
                include_str!("kernels/paged.cuh"),
                include_str!("kernels/copy_async.cuh"),
                include_str!("kernels/tensor_core.cuh")
            ),
            include_str!("kernels/attention_prefill.cu"),
        ),
        ("fused", FUSED, include_str!("kernels/fused.cu")),
        ("top_k", "", include_str!("kernels/top_k.cu")),
    ]
    .map(|(name, headers, source)| (name, format!("{PDL}{headers}{source}")))
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
    pub attention_partial: SplitKernel,
    pub attention_combine: CudaFunction,
    /// By head dimension and most heads per block (`DECODE_HEAD_DIMS`, `DECODE_HEADS`).
    pub attention_decode: [[SplitKernel; 4]; 3],
    /// By head dimension (`PREFILL_HEAD_DIMS`).
    pub attention_prefill: [CudaFunction; 2],
    pub add_rms_norm: CudaFunction,
    /// The decode step's producers that also write 8-bit rows (`rms_norm_q8` and the others).
    pub rms_norm_q8: CudaFunction,
    pub add_rms_norm_q8: CudaFunction,
    pub gated_activation_bias_q8: CudaFunction,
    pub rope_store_kv: CudaFunction,
    pub gated_activation_bias: CudaFunction,
    pub top_k: CudaFunction,
    /// Whether these kernels are launched with programmatic dependent launch (see `launch`).
    pub pdl: bool,
}

/// An attention kernel that cuts each token's positions into splits, one block each, and
/// how many of its blocks of `SPLIT_THREADS` one multiprocessor holds at once (its registers
/// and shared memory decide): the splits are cut so that a pass's blocks all run at once.
pub(crate) struct SplitKernel {
    pub function: CudaFunction,
    pub blocks_per_sm: usize,
}

impl SplitKernel {
    fn new(function: CudaFunction) -> Result<SplitKernel> {
        let blocks = function
            .occupancy_max_active_blocks_per_multiprocessor(SPLIT_THREADS, 0, None)
            .map_err(failed("load_module"))?;
        Ok(SplitKernel {
            function,
            blocks_per_sm: (blocks as usize).max(1),
        })
    }
}

impl Kernels {
    /// Compiles (or takes from the disk cache) the kernels for `ctx`'s device, to be launched
    /// with programmatic dependent launch where `pdl` is set.
    pub fn load(ctx: &Arc<CudaContext>, pdl: bool) -> Result<Kernels> {
        let [elementwise, rms_norm, rope, kv, attention, decode, prefill, fused, top_k] =
            sources().map(|(name, source)| load_module(ctx, name, &source));
        let (elementwise, rms_norm, rope, kv, attention, decode, prefill, fused, top_k) = (
            elementwise?,
            rms_norm?,
            rope?,
            kv?,
            attention?,
            decode?,
            prefill?,
            fused?,
            top_k?,
        );
        let f = |module: &Arc<cudarc::driver::CudaModule>, name: &str| {
            module.load_function(name).map_err(failed("load_module"))
        };
        let decode_heads = |hd: usize| {
            let [a, b, c, d] = DECODE_HEADS.map(|heads| {
                SplitKernel::new(f(&decode, &format!("attention_decode_{hd}_{heads}"))?)
            });
            Ok::<_, plumb_model::ModelError>([a?, b?, c?, d?])
        };
        let [d64, d128, d256] = DECODE_HEAD_DIMS.map(decode_heads);
        let [p64, p128] =
            PREFILL_HEAD_DIMS.map(|hd| f(&prefill, &format!("attention_prefill_{hd}")));
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
            attention_partial: SplitKernel::new(f(&attention, "attention_partial")?)?,
            attention_combine: f(&attention, "attention_combine")?,
            attention_decode: [d64?, d128?, d256?],
            attention_prefill: [p64?, p128?],
            add_rms_norm: f(&fused, "add_rms_norm")?,
            rms_norm_q8: f(&rms_norm, "rms_norm_q8")?,
            add_rms_norm_q8: f(&fused, "add_rms_norm_q8")?,
            gated_activation_bias_q8: f(&fused, "gated_activation_bias_q8")?,
            rope_store_kv: f(&fused, "rope_store_kv")?,
            gated_activation_bias: f(&fused, "gated_activation_bias")?,
            top_k: f(&top_k, "top_k")?,
            pdl,
        })
    }

    /// A launch of `function`, one of these kernels, on `stream`.
    pub fn launch<'a>(
        &self,
        stream: &'a Arc<CudaStream>,
        function: &'a CudaFunction,
    ) -> Launch<'a> {
        Launch::new(stream, function, self.pdl)
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
