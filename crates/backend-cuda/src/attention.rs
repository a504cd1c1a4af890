//! Attention over the f16 cache: store the batch's K and V rows in their slots; attend.
//! Prompts go to a flash-attention kernel on tensor cores (`kernels/attention_prefill.cu`);
//! decoding to a flash-decoding kernel (`kernels/attention_decode.cu`) that splits long
//! contexts across blocks when the batch alone would leave the GPU idle; head dimensions
//! that neither takes to the general kernel (`kernels/attention.cu`), which splits likewise.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, LaunchConfig, PushKernelArg};
use plumb_model::{Activations, AttentionStep, Result, Rope, RopeStyle, TokenPos};

use crate::error::{error, failed};
use crate::kernels::{Kernels, SplitKernel};
use crate::kv_storage::LayerStore;
use crate::pass_inputs::LayerInputs;
use crate::pool::Pool;
use crate::tensor::CudaTensor;

const OP: &str = "attention";
/// Must match `kernels/attention.cu` and `kernels/attention_decode.cu` (DECODE_WARPS).
const WARPS: u32 = 4;
/// The threads of a block of the kernels that split the positions.
pub(crate) const SPLIT_THREADS: u32 = WARPS * 32;
/// Must match `kernels/attention.cu` (COMBINE_THREADS, MAX_SPLITS).
const COMBINE_THREADS: u32 = 256;
const MAX_SPLITS: usize = 1024;
/// Must match `kernels/attention_prefill.cu`.
const PREFILL_WARPS: u32 = 4;
const PREFILL_ROWS: u32 = PREFILL_WARPS * 16;
/// The head dimensions of the tensor-core kernels (`attention_prefill_*`).
pub(crate) const PREFILL_HEAD_DIMS: [usize; 2] = [64, 128];
/// The head dimensions and the most query heads per block of the flash-decoding kernels
/// (`attention_decode_*_*`).
pub(crate) const DECODE_HEAD_DIMS: [usize; 3] = [64, 128, 256];
pub(crate) const DECODE_HEADS: [usize; 4] = [1, 2, 4, 8];
/// The positions that a decode step's tokens read in all (tokens times the most that one sees)
/// up to which the flash-decoding kernel takes one query head a block, not all the heads that
/// share a KV head. With few positions a block of a whole group (and a split of at least
/// `CHUNK_QUANTUM` positions) leaves the GPU idle: TinyLlama (8 heads a KV head), an H200,
/// tokens/s with one head a block against eight: tg128 1,099 – 1,100 against 1,022 – 1,027; 4
/// and 16 sequences 3,181 – 3,232 and 9,804 – 10,137 against 3,043 – 3,069 and 9,167 – 9,181; at
/// 4096 positions 907 – 937 against 898 (docs/benchmarks.md, 2026-11-29, fifth round). Above
/// it the heads of a group share each key and value row read (not measured with one head a
/// block).
const ONE_HEAD_POSITIONS: usize = 8192;
/// Tokens per run of one sequence from which a pass goes to the tensor-core kernel.
const PROMPT_RUN: usize = 16;
const MAX_HEAD_DIM: usize = 256;
/// A split's positions are a multiple of this: fewer are not worth a split of their own, since
/// several splits take `attention_combine`, a kernel more a layer; and the flash-decoding kernel
/// stages 64, 32 or 16 positions at a time, so that no stage is cut short but the last. A
/// recorded step rounds its context up to 256 positions (`pass_inputs`), which with 64 made
/// every short context 4 splits and a combine: on an H200, TinyLlama Q4_K_M tg128 1,143 – 1,172
/// tokens/s with 64, 1,123 – 1,164 with 128, 1,241 – 1,259 with 256; 4 sequences 3,209 – 3,305,
/// 3,263 – 3,273 and 3,427 – 3,472; a 7B of 8 layers 1,464 – 1,470 and 1,503 – 1,512 with 256;
/// at 4096 positions no slower (docs/benchmarks.md, 2026-11-29, fifth round).
const CHUNK_QUANTUM: usize = 256;

pub(crate) struct Attention<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub pool: &'a Arc<Pool>,
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
            .arg(k.data())
            .arg(v.data())
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

    /// RoPE on Q and K in place, then K and V into their slots of `layer`, in one launch
    /// (with PDL where the backend uses it: launch.rs); the caller has checked the shapes and
    /// slots, that K's heads are `head_dim` wide and that the rope rotates at least one pair.
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
        let mut launch = self
            .kernels
            .launch(self.stream, &self.kernels.rope_store_kv);
        launch
            .arg(q.data_mut())
            .arg(k.data_mut())
            .arg(v.data())
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
        unsafe { launch.run(cfg) }.map_err(failed("rope_store_kv"))?;
        Ok((q, k))
    }

    /// Attends every token of the pass over `layer`, whose keys and values for the pass are
    /// stored. The caller has checked the shapes and block tables.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        q: &CudaTensor,
        layer: &LayerStore,
        step: &AttentionStep,
        block_size: usize,
        places: &[TokenPos],
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
        let mut out = CudaTensor::uninit(self.pool, OP, n_tokens, step.n_head * hd_v)?;
        if n_tokens == 0 {
            return Ok(out);
        }
        let args = Args {
            n_tokens: n_tokens as u32,
            n_head: step.n_head as u32,
            n_head_kv: shape.n_head_kv as u32,
            window: shape.window.map_or(0, |w| w as u32),
            block_shift: block_size.trailing_zeros(),
            scale: step.scale,
        };
        let group = step.n_head / shape.n_head_kv;
        match path(hd_k, hd_v, group, places, inputs.max_visible) {
            Path::Prompts { hd } => {
                self.prompts(q, layer, positions, inputs, &args, hd, &mut out)?
            }
            Path::Decode { hd, heads } => {
                let kernel = &self.kernels.attention_decode[hd][heads];
                let parts = group.div_ceil(DECODE_HEADS[heads]);
                let grid_y = shape.n_head_kv * parts;
                let ctx = Split {
                    layer,
                    positions,
                    inputs,
                    args: &args,
                    hd_v,
                    grid_y,
                };
                self.split(q, kernel, &ctx, &[], &mut out)?;
            }
            Path::General => {
                let ctx = Split {
                    layer,
                    positions,
                    inputs,
                    args: &args,
                    hd_v,
                    grid_y: step.n_head,
                };
                let dims = [hd_k as u32, hd_v as u32];
                self.split(q, &self.kernels.attention_partial, &ctx, &dims, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The tensor-core kernel: one block per (query head, tile of tokens).
    #[allow(clippy::too_many_arguments)]
    fn prompts(
        &self,
        q: &CudaTensor,
        layer: &LayerStore,
        positions: &CudaView<'_, u32>,
        inputs: &LayerInputs<'_>,
        args: &Args,
        hd: usize,
        out: &mut CudaTensor,
    ) -> Result<()> {
        let cfg = LaunchConfig {
            grid_dim: (args.n_head, args.n_tokens.div_ceil(PREFILL_ROWS), 1),
            block_dim: (PREFILL_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self
            .stream
            .launch_builder(&self.kernels.attention_prefill[hd]);
        launch
            .arg(q.data())
            .arg(&layer.k)
            .arg(&layer.v)
            .arg(positions)
            .arg(&inputs.table_starts)
            .arg(&inputs.tables)
            .arg(out.data_mut())
            .arg(&args.n_tokens)
            .arg(&args.n_head)
            .arg(&args.n_head_kv)
            .arg(&args.window)
            .arg(&args.block_shift)
            .arg(&args.scale);
        // SAFETY: the block tables are checked to hold every position each token sees, and
        // their blocks to be in the layer; Q and the output hold n_tokens rows of n_head
        // heads of `hd` dimensions.
        unsafe { launch.launch(cfg) }.map_err(failed(OP))?;
        Ok(())
    }

    /// A kernel that cuts each token's positions into splits (`attention_decode_*`, or the
    /// general `attention_partial`, which also takes the head dimensions `dims`), then
    /// `attention_combine` where there are several.
    fn split(
        &self,
        q: &CudaTensor,
        kernel: &SplitKernel,
        ctx: &Split<'_>,
        dims: &[u32],
        out: &mut CudaTensor,
    ) -> Result<()> {
        let args = ctx.args;
        let n_tokens = args.n_tokens as usize;
        let hd_v = ctx.hd_v;
        let (n_splits, chunk) = self.splits(
            n_tokens * ctx.grid_y,
            ctx.inputs.max_visible,
            kernel.blocks_per_sm,
        );
        let partial_len = if n_splits > 1 {
            n_tokens * args.n_head as usize * n_splits * (hd_v + 2)
        } else {
            1
        };
        // SAFETY: with several splits every block writes its whole partial state before
        // the combine reads it; with one it is not read.
        let mut partial = unsafe { self.pool.take::<f32>(OP, partial_len) }?;
        let chunk = chunk as u32;
        let cfg = LaunchConfig {
            grid_dim: (n_splits as u32, ctx.grid_y as u32, args.n_tokens),
            block_dim: (SPLIT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.stream.launch_builder(&kernel.function);
        launch
            .arg(q.data())
            .arg(&ctx.layer.k)
            .arg(&ctx.layer.v)
            .arg(ctx.positions)
            .arg(&ctx.inputs.table_starts)
            .arg(&ctx.inputs.tables)
            .arg(out.data_mut())
            .arg(&mut *partial)
            .arg(&args.n_head)
            .arg(&args.n_head_kv);
        for d in dims {
            launch.arg(d);
        }
        launch
            .arg(&args.window)
            .arg(&args.block_shift)
            .arg(&args.scale)
            .arg(&chunk);
        // SAFETY: the block tables are checked to hold every position each token sees, and
        // their blocks to be in the layer.
        unsafe { launch.launch(cfg) }.map_err(failed(OP))?;

        if n_splits > 1 {
            let (n_splits, hd_v) = (n_splits as u32, hd_v as u32);
            let cfg = LaunchConfig {
                grid_dim: (args.n_head, args.n_tokens, 1),
                block_dim: (COMBINE_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = self.stream.launch_builder(&self.kernels.attention_combine);
            launch
                .arg(&*partial)
                .arg(out.data_mut())
                .arg(&args.n_head)
                .arg(&hd_v)
                .arg(&n_splits);
            // SAFETY: partial holds every split of every (token, head).
            unsafe { launch.launch(cfg) }.map_err(failed(OP))?;
        }
        Ok(())
    }

    /// How many splits of how many positions each, for `pairs` blocks per split: as many
    /// splits as the GPU holds blocks of the kernel at once (`blocks_per_sm` on each
    /// multiprocessor), fewer where that would make splits of fewer than `CHUNK_QUANTUM`
    /// positions, each a multiple of it. Decoding is bound by how many key and value rows
    /// are in flight: fewer blocks leave multiprocessors idle, more queue behind the first
    /// wave (a 4096-position TinyLlama step in graphs was cut into 68 splits, 272 blocks where
    /// 264 fit at once), and every split is one more state for `attention_combine` to read.
    fn splits(&self, pairs: usize, max_visible: usize, blocks_per_sm: usize) -> (usize, usize) {
        split_count(blocks_per_sm * self.n_sm, pairs, max_visible)
    }
}

/// `splits` for a GPU that holds `resident` blocks of the kernel at once.
fn split_count(resident: usize, pairs: usize, max_visible: usize) -> (usize, usize) {
    let visible = max_visible.max(1);
    let most = (resident / pairs.max(1)).clamp(1, MAX_SPLITS);
    let chunk = visible.div_ceil(most).next_multiple_of(CHUNK_QUANTUM);
    (visible.div_ceil(chunk), chunk)
}

/// What every attention kernel takes besides its buffers.
struct Args {
    n_tokens: u32,
    n_head: u32,
    n_head_kv: u32,
    /// 0 for none.
    window: u32,
    block_shift: u32,
    scale: f32,
}

/// The buffers and grid of a kernel that splits the positions.
struct Split<'a> {
    layer: &'a LayerStore,
    positions: &'a CudaView<'a, u32>,
    inputs: &'a LayerInputs<'a>,
    args: &'a Args,
    hd_v: usize,
    /// Blocks per token and split.
    grid_y: usize,
}

/// Which kernel attends a pass.
#[derive(Debug, PartialEq, Eq)]
enum Path {
    /// `attention_prefill_{PREFILL_HEAD_DIMS[hd]}`.
    Prompts { hd: usize },
    /// `attention_decode_{DECODE_HEAD_DIMS[hd]}_{DECODE_HEADS[heads]}`.
    Decode { hd: usize, heads: usize },
    /// `attention_partial`: any head dimensions up to `MAX_HEAD_DIM`.
    General,
}

/// The tensor-core kernel for passes whose tokens come in runs of one sequence at least
/// `PROMPT_RUN` long on average (prompts: the keys a tile loads serve its many tokens), the
/// flash-decoding kernel for the others (one token or a few per sequence; each sees at most
/// `max_visible` positions), and the general kernel for head dimensions neither takes.
fn path(hd_k: usize, hd_v: usize, group: usize, places: &[TokenPos], max_visible: usize) -> Path {
    if hd_k != hd_v {
        return Path::General;
    }
    let runs = 1 + places.windows(2).filter(|w| w[0].seq != w[1].seq).count();
    if places.len() >= PROMPT_RUN * runs {
        if let Some(hd) = PREFILL_HEAD_DIMS.iter().position(|&d| d == hd_k) {
            return Path::Prompts { hd };
        }
    }
    match DECODE_HEAD_DIMS.iter().position(|&d| d == hd_k) {
        Some(hd) => {
            // One head a block for a step of few positions, else the fewest heads per block
            // that hold the group, or the most there are.
            let heads = if places.len() * max_visible <= ONE_HEAD_POSITIONS {
                0
            } else {
                DECODE_HEADS
                    .iter()
                    .position(|&h| h >= group)
                    .unwrap_or(DECODE_HEADS.len() - 1)
            };
            Path::Decode { hd, heads }
        }
        None => Path::General,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(runs: &[(usize, usize)]) -> Vec<TokenPos> {
        runs.iter()
            .flat_map(|&(seq, n)| (0..n).map(move |pos| TokenPos { seq, pos }))
            .collect()
    }

    #[test]
    fn prompts_go_to_tensor_cores_and_decoding_to_flash_decoding() {
        let prompt = places(&[(0, 512)]);
        assert_eq!(path(128, 128, 1, &prompt, 512), Path::Prompts { hd: 1 });
        assert_eq!(
            path(64, 64, 8, &places(&[(0, 20), (1, 30)]), 30),
            Path::Prompts { hd: 0 }
        );
        // One token of each of a few sequences or a few of each: (head dimension, group,
        // tokens, the most positions one sees) and the kernel's (hd, heads).
        let decode = places(&[(0, 1), (1, 1), (2, 1), (3, 3)]);
        let one = places(&[(0, 1)]);
        let long = 4096;
        for (dim, group, tokens, visible, hd, heads) in [
            // Long contexts: the fewest heads a block that hold the group.
            (128, 1, &decode, long, 1, 0),
            (64, 7, &decode, long, 0, 3),
            (256, 3, &decode, long, 2, 2),
            (256, 16, &decode, long, 2, 3),
            // Few positions in all: one head a block.
            (64, 8, &decode, 256, 0, 0),
            (64, 8, &one, 8192, 0, 0),
            (64, 8, &one, 8193, 0, 3),
            // Tensor cores take no heads of 256.
            (256, 4, &prompt, long, 2, 2),
        ] {
            assert_eq!(
                path(dim, dim, group, tokens, visible),
                Path::Decode { hd, heads },
                "heads of {dim}, groups of {group}, {} tokens seeing {visible}",
                tokens.len()
            );
        }
        // Nothing but the general kernel takes heads of 96, or K and V of different widths.
        assert_eq!(path(96, 96, 1, &prompt, long), Path::General);
        assert_eq!(path(128, 64, 1, &decode, long), Path::General);
    }

    #[test]
    fn splits_fill_one_wave_of_blocks_in_whole_quanta() {
        // 4 KV heads of 8 query heads on an H200 (132 multiprocessors), 2 blocks a
        // multiprocessor, at 4096 positions (a graph rounds them to 4352).
        assert_eq!(split_count(2 * 132, 4, 4352), (17, 256));
        // 32 heads a block each, 6 blocks a multiprocessor.
        assert_eq!(split_count(6 * 132, 32, 4352), (17, 256));
        // A short context as a graph rounds it: one split, no combine.
        assert_eq!(split_count(6 * 132, 32, 256), (1, 256));
        // A batch that fills the GPU alone, a short context, nothing visible.
        assert_eq!(split_count(264, 300, 4352), (1, 4352));
        assert_eq!(split_count(264, 4, 1000), (4, 256));
        assert_eq!(split_count(264, 4, 0), (1, 256));
        for (resident, pairs, visible) in [(264, 1, 1 << 20), (10_000, 3, 77_777), (7, 9, 5)] {
            let (n, chunk) = split_count(resident, pairs, visible);
            assert!(n * chunk >= visible && (n - 1) * chunk < visible.max(1));
            assert!(
                n <= (resident / pairs).clamp(1, MAX_SPLITS),
                "{resident} {pairs} {visible}"
            );
            assert_eq!(chunk % CHUNK_QUANTUM, 0);
        }
    }
}
