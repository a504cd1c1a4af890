//! Attention over the f16 cache: store the batch's K and V rows in their slots; attend
//! (`kernels/attention.cu`), splitting long contexts across blocks when the batch alone
//! would leave the GPU idle.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
use plumb_model::{Activations, AttentionStep, Result, Rope, RopeStyle};

use crate::error::{error, failed};
use crate::kernels::Kernels;
use crate::kv_storage::LayerStore;
use crate::pass_inputs::LayerInputs;
use crate::tensor::CudaTensor;

const OP: &str = "attention";
/// Must match `kernels/attention.cu`.
const WARPS: u32 = 4;
const MAX_HEAD_DIM: usize = 256;
/// The fewest positions worth a split of their own: below this, merging costs more than the
/// parallelism gains.
const MIN_CHUNK: usize = 64;
/// Blocks per multiprocessor that splitting a long context aims for: decoding is bound by
/// how many key and value rows are in flight, and at 2 a 4096-position 7B step read its
/// cache at a tenth of the bandwidth.
const BLOCKS_PER_SM: usize = 8;

pub(crate) struct Attention<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub kernels: &'a Kernels,
    /// Streaming multiprocessors: how many blocks keep the GPU busy.
    pub n_sm: usize,
}

impl Attention<'_> {
    /// Rounds each token's K and V rows to f16 and stores them in its slot of `layer`. The
    /// caller has checked the shapes and slots.
    pub fn store_kv(
        &self,
        k: &CudaTensor,
        v: &CudaTensor,
        layer: &mut LayerStore,
        slots: &CudaView<'_, u32>,
    ) -> Result<()> {
        let shape = layer.shape;
        let n_tokens = k.n_tokens();
        if n_tokens == 0 {
            return Ok(());
        }
        let (k_width, v_width, n_tok) = (
            shape.k_width() as u32,
            shape.v_width() as u32,
            n_tokens as u32,
        );
        let cfg = LaunchConfig {
            grid_dim: (
                shape.k_width().max(shape.v_width()).div_ceil(256) as u32,
                n_tok,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.kernels.store_kv);
        launch
            .arg(&k.data)
            .arg(&v.data)
            .arg(slots)
            .arg(&mut layer.k)
            .arg(&mut layer.v)
            .arg(&k_width)
            .arg(&v_width)
            .arg(&n_tok);
        // SAFETY: K and V hold n_tokens rows of their widths; the slots are checked to be in
        // the layer.
        unsafe { launch.launch(cfg) }.map_err(failed("store_kv"))?;
        Ok(())
    }

    /// RoPE on Q and K in place, then K and V into their slots of `layer`, in one launch;
    /// the caller has checked the shapes and slots, that K's heads are `head_dim` wide and
    /// that the rope rotates at least one pair.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_store_kv(
        &self,
        mut q: CudaTensor,
        mut k: CudaTensor,
        v: &CudaTensor,
        layer: &mut LayerStore,
        head_dim: usize,
        rope: &Rope,
        inv_freq: &CudaSlice<f64>,
        positions: &CudaView<'_, u32>,
        slots: &CudaView<'_, u32>,
    ) -> Result<(CudaTensor, CudaTensor)> {
        let n_tokens = q.n_tokens();
        if n_tokens == 0 {
            return Ok((q, k));
        }
        let (n_head, n_head_kv) = ((q.width() / head_dim) as u32, (k.width() / head_dim) as u32);
        let (hd, n_rot) = (head_dim as u32, rope.n_rot as u32);
        let neox = i32::from(rope.style == RopeStyle::Neox);
        let v_width = layer.shape.v_width() as u32;
        // One block per (token, head); the value heads are as many as the key heads.
        let cfg = LaunchConfig {
            grid_dim: (n_tokens as u32, n_head + n_head_kv, 1),
            block_dim: (hd.next_multiple_of(32).min(256), 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.kernels.rope_store_kv);
        launch
            .arg(&mut q.data)
            .arg(&mut k.data)
            .arg(&v.data)
            .arg(positions)
            .arg(inv_freq)
            .arg(slots)
            .arg(&mut layer.k)
            .arg(&mut layer.v)
            .arg(&n_head)
            .arg(&n_head_kv)
            .arg(&hd)
            .arg(&n_rot)
            .arg(&neox)
            .arg(&v_width);
        // SAFETY: Q, K and V hold n_tokens rows of whole heads; positions and slots hold
        // n_tokens entries, the slots in the layer; inv_freq holds n_rot / 2.
        unsafe { launch.launch(cfg) }.map_err(failed("rope_store_kv"))?;
        Ok((q, k))
    }

    /// Attends every token of the pass over `layer`, whose keys and values for the pass are
    /// stored. The caller has checked the shapes and block tables.
    pub fn run(
        &self,
        q: &CudaTensor,
        layer: &LayerStore,
        step: &AttentionStep,
        block_size: usize,
        positions: &CudaView<'_, u32>,
        inputs: &LayerInputs<'_>,
    ) -> Result<CudaTensor> {
        let shape = layer.shape;
        let (hd_k, hd_v) = (shape.head_dim_k, shape.head_dim_v);
        if hd_k > MAX_HEAD_DIM || hd_v > MAX_HEAD_DIM {
            return Err(error(
                OP,
                format!(
                    "heads of {hd_k} (K) and {hd_v} (V) dimensions: the kernel takes at most \
                     {MAX_HEAD_DIM}"
                ),
            ));
        }
        let n_tokens = q.n_tokens();
        let mut out = CudaTensor::uninit(self.stream, OP, n_tokens, step.n_head * hd_v)?;
        if n_tokens == 0 {
            return Ok(out);
        }
        let n_tok = n_tokens as u32;
        let (n_splits, chunk) = self.splits(n_tokens * step.n_head, inputs.max_visible);
        let partial_len = if n_splits > 1 {
            n_tokens * step.n_head * n_splits * (hd_v + 2)
        } else {
            1
        };
        // SAFETY: with several splits every block writes its whole partial state before
        // the combine reads it; with one it is not read.
        let mut partial = unsafe { self.stream.alloc::<f32>(partial_len) }.map_err(failed(OP))?;
        let (n_head, n_head_kv) = (step.n_head as u32, shape.n_head_kv as u32);
        let (hd_k, hd_v) = (hd_k as u32, hd_v as u32);
        let window = shape.window.map_or(0, |w| w as u32);
        let block_shift = block_size.trailing_zeros();
        let chunk = chunk as u32;
        let cfg = LaunchConfig {
            grid_dim: (n_splits as u32, n_head, n_tok),
            block_dim: (WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&self.kernels.attention_partial);
        launch
            .arg(&q.data)
            .arg(&layer.k)
            .arg(&layer.v)
            .arg(positions)
            .arg(&inputs.table_starts)
            .arg(&inputs.tables)
            .arg(&mut out.data)
            .arg(&mut partial)
            .arg(&n_head)
            .arg(&n_head_kv)
            .arg(&hd_k)
            .arg(&hd_v)
            .arg(&window)
            .arg(&block_shift)
            .arg(&step.scale)
            .arg(&chunk);
        // SAFETY: the block tables are checked to hold every position each token sees, and
        // their blocks to be in the layer.
        unsafe { launch.launch(cfg) }.map_err(failed(OP))?;

        if n_splits > 1 {
            let n_splits = n_splits as u32;
            let cfg = LaunchConfig {
                grid_dim: (n_head, n_tok, 1),
                block_dim: (hd_v.next_multiple_of(32).min(256), 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = self.stream.launch_builder(&self.kernels.attention_combine);
            launch
                .arg(&partial)
                .arg(&mut out.data)
                .arg(&n_head)
                .arg(&hd_v)
                .arg(&n_splits);
            // SAFETY: partial holds every split of every (token, head).
            unsafe { launch.launch(cfg) }.map_err(failed(OP))?;
        }
        Ok(out)
    }

    /// How many splits of how many positions each: one split when the (token, head) pairs
    /// alone give every multiprocessor `BLOCKS_PER_SM` blocks, else enough to, each at least
    /// `MIN_CHUNK` positions.
    fn splits(&self, pairs: usize, max_visible: usize) -> (usize, usize) {
        let wanted = (BLOCKS_PER_SM * self.n_sm).div_ceil(pairs.max(1));
        let n_splits = wanted.min(max_visible.div_ceil(MIN_CHUNK)).max(1);
        let chunk = max_visible.div_ceil(n_splits).max(1);
        (max_visible.div_ceil(chunk).max(1), chunk)
    }
}
