//! The portable GPU backend: WGSL kernels run through wgpu on Vulkan (Linux, Windows; Mesa's
//! lavapipe on the CPU in CI) and Metal (macOS).
//!
//! Weights are uploaded once, as the GGUF blocks are stored, and dequantized by the kernels
//! that read them (`shaders/dequant.wgsl`); a weight larger than a binding is split by rows,
//! and a batch whose activations are (the logits of a long prompt) is processed in windows.
//! Activations are f32 device buffers; every product and reduction accumulates in f32, but
//! for the decoding products of Q4_K on devices with subgroup operations, which quantize each
//! 16 activations to bytes and sum integer products (`unit_products.rs`). The KV cache is f16, paged as [`plumb_model::KvCache`] lays it out. RoPE angles are computed
//! on the host in f64, per pass.
//!
//! Ops only record work, submitted in command buffers of a few dozen dispatches as they are
//! recorded (`commands.rs`); the host waits for the GPU only when the logits are read back
//! ([`Backend::to_host`]) or reduced to their top-k on the device ([`Backend::top_k`]).
//!
//! What the kernels need of the device: compute shaders and storage buffers (WebGPU's core).
//! The matrix products use subgroup operations (`subgroupAdd`) where the device has them,
//! else a reduction in workgroup memory; both are tested. `shader-f16` is not needed: f16
//! values are packed and unpacked with WGSL's core `pack2x16float`/`unpack2x16float`. The
//! integer products are WGSL's `dot4I8Packed` (one instruction where the Vulkan driver has
//! integer dot products, a few otherwise).

mod bind_groups;
mod buffer_pool;
mod commands;
mod gpu;
mod kernels;
mod kv_storage;
mod params;
mod pass;
mod quant;
mod tensor;
mod timings;
mod unit_products;
mod wait;
mod weights;

use std::ops::Range;

use plumb_backend_ref::Checks;
use plumb_model::{
    Activation, AttentionStep, Backend, BlockCopy, GatedFfnWeights, KvLayout, PassInputs,
    Projection, Result, Rope, RopeStyle, WeightTensor, WeightUse,
};

pub use kv_storage::GpuKvStorage;
pub use pass::GpuPass;
pub use quant::SUPPORTED as SUPPORTED_TYPES;
pub use tensor::GpuTensor;
pub use weights::GpuWeight;

use buffer_pool::BufferPool;
use commands::Recorder;
use gpu::{Gpu, TENSOR_USAGE};
use kernels::{Kernel, Kernels};
use quant::Quant;
use weights::{RowMatrix, Uploaded, WeightKind};

const NAME: &str = "wgpu";
const CHECK: Checks = Checks { backend: NAME };

/// The widest head the attention kernel takes (its workgroup holds one query head).
pub const MAX_HEAD_DIM: usize = 256;

/// The wgpu backend.
pub struct WgpuBackend {
    gpu: Gpu,
    kernels: Kernels,
    recorder: Recorder,
    uploaded: Uploaded,
    /// Activation buffers of dropped tensors, for the next tensors of their sizes.
    pool: BufferPool,
    /// The largest binding: the adapter's, unless a test asks for less.
    max_binding: u64,
    /// Whether the matrix products use subgroup operations (where the device has them).
    subgroups: bool,
    /// Rows per subgroup (or workgroup) of the mat-vec kernels but `matvec_units.wgsl`.
    matvec_rows: u32,
}

/// Products of at most this many tokens (decoding) take the mat-vec kernels, which read the
/// weights once per token; larger ones the tiled product, which reads them once per 16.
const MATVEC_MAX_TOKENS: usize = 4;

/// Rows per subgroup of the mat-vec kernels: each activation value loaded is used for this
/// many rows. On the H200 (Vulkan), 7B Q4_K_M decoded at 41.8, 48.6 and 45.6 tokens/s with
/// 1, 2 and 4.
const MATVEC_ROWS: u32 = 2;

impl WgpuBackend {
    /// Opens the best GPU adapter wgpu finds. Fails when there is none.
    pub fn new() -> Result<WgpuBackend> {
        let gpu = Gpu::open().map_err(|e| CHECK.error("new", e))?;
        tracing::info!(
            adapter = %gpu.adapter.name,
            backend = ?gpu.adapter.backend,
            device_type = ?gpu.adapter.device_type,
            max_binding = gpu.max_binding_bytes(),
            shader_f16 = gpu.shader_f16,
            max_subgroup = ?gpu.max_subgroup,
            "wgpu backend"
        );
        let recorder = Recorder::new(&gpu);
        Ok(WgpuBackend {
            max_binding: gpu.max_binding_bytes(),
            subgroups: gpu.max_subgroup.is_some(),
            matvec_rows: MATVEC_ROWS,
            gpu,
            kernels: Kernels::default(),
            recorder,
            uploaded: Uploaded::default(),
            pool: BufferPool::default(),
        })
    }

    /// Binds at most `bytes` at once, as if the adapter allowed no more: weights are split
    /// into chunks and long batches into windows of that size, as large ones are on any
    /// adapter. For tests of the splitting.
    pub fn with_max_binding(mut self, bytes: u64) -> WgpuBackend {
        self.max_binding = self.gpu.max_binding_bytes().min(bytes & !3);
        self
    }

    /// Reduces through workgroup memory even where the device has subgroup operations: the
    /// path of devices without them, for tests of it.
    pub fn without_subgroups(mut self) -> WgpuBackend {
        self.subgroups = false;
        self
    }

    /// Gives each subgroup (or workgroup) of the mat-vec kernels `rows` rows (at least 1),
    /// for tests of rows that do not fill the last one.
    pub fn with_matvec_rows(mut self, rows: u32) -> WgpuBackend {
        self.matvec_rows = rows.max(1);
        self
    }

    /// Whether the matrix products use subgroup operations.
    pub fn uses_subgroups(&self) -> bool {
        self.subgroups
    }

    /// Whether products of `n_tokens` tokens by weights of `ty` multiply quantized
    /// activations: decoding products of the unit kernels' types (Q4_K) with subgroup
    /// operations do, each 16 activations from the row's start as bytes q = round(v · 127 /
    /// amax), ties to even, with the scale amax / 127 (`shaders/quantize_x16.wgsl`). Others
    /// multiply the f32 activations.
    pub fn quantizes_activations(&self, ty: plumb_gguf::GgmlType, n_tokens: usize) -> bool {
        Quant::of(ty).is_some_and(|quant| self.takes_units(quant, n_tokens))
    }

    /// Readbacks so far, each a wait for the GPU: one per forward pass, and one per
    /// tensor an observer asks for.
    pub fn readbacks(&self) -> u64 {
        self.recorder.readbacks()
    }

    /// Whether the adapter is a CPU (lavapipe): the same kernels, orders of magnitude slower.
    pub fn is_cpu(&self) -> bool {
        self.gpu.adapter.device_type == wgpu::DeviceType::Cpu
    }

    /// The adapter's name and API, for messages: "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)".
    pub fn adapter(&self) -> String {
        format!("{} ({:?})", self.gpu.adapter.name, self.gpu.adapter.backend)
    }

    /// Records `kernel` with whole buffers bound, each of which must fit a binding.
    fn dispatch(
        &self,
        op: &'static str,
        kernel: Kernel,
        params: &[u32],
        buffers: &[&wgpu::Buffer],
        workgroups: usize,
        z: usize,
    ) -> Result<()> {
        let max = self.max_binding;
        if let Some(large) = buffers.iter().find(|b| b.size() > max) {
            return Err(CHECK.error(
                op,
                format!(
                    "a {}-byte tensor is more than the adapter binds ({max}); pass fewer tokens",
                    large.size()
                ),
            ));
        }
        let bindings: Vec<_> = buffers
            .iter()
            .map(|b| b.as_entire_buffer_binding())
            .collect();
        self.dispatch_bound(op, (kernel, 0), params, &bindings, workgroups, z)
    }

    /// Records `kernel`, which reads `weight_bytes` of weights (for the timings), with the
    /// given bindings (parts of buffers).
    fn dispatch_bound(
        &self,
        op: &'static str,
        (kernel, weight_bytes): (Kernel, u64),
        params: &[u32],
        bindings: &[wgpu::BufferBinding<'_>],
        workgroups: usize,
        z: usize,
    ) -> Result<()> {
        let pipeline = self
            .kernels
            .get(&self.gpu, kernel)
            .map_err(|e| CHECK.error(op, e))?;
        self.recorder
            .dispatch(
                &self.gpu,
                (kernel, weight_bytes),
                &pipeline,
                params,
                bindings,
                workgroups,
                z,
            )
            .map_err(|e| CHECK.error(op, e))
    }

    /// Ranges of `n_tokens` rows small enough that each of the tensors with rows of
    /// `row_bytes` has its part of them in one binding, starting at offsets the device can
    /// bind: the logits of a long prompt are larger than a binding.
    fn token_windows(
        &self,
        op: &'static str,
        n_tokens: usize,
        row_bytes: &[usize],
    ) -> Result<Vec<Range<usize>>> {
        let max = self.max_binding as usize;
        let widest = row_bytes.iter().copied().max().unwrap_or(1).max(1);
        let fit = max / widest;
        // Offsets must be multiples of the alignment, a power of two: a window starts at a
        // multiple of `unit` rows.
        let align = self.gpu.limits.min_storage_buffer_offset_alignment.max(1) as usize;
        let unit = row_bytes
            .iter()
            .map(|&b| align >> b.trailing_zeros().min(align.trailing_zeros()))
            .max()
            .unwrap_or(1);
        let per_window = if fit >= n_tokens {
            n_tokens.max(1)
        } else {
            fit / unit * unit
        };
        if per_window == 0 {
            return Err(CHECK.error(
                op,
                format!("rows of {widest} bytes do not fit a binding of {max} in aligned windows"),
            ));
        }
        Ok((0..n_tokens)
            .step_by(per_window)
            .map(|start| start..(start + per_window).min(n_tokens))
            .collect())
    }

    /// A tensor of `n_tokens × width` values whose kernel writes all of them.
    fn tensor(&self, op: &'static str, n_tokens: usize, width: usize) -> Result<GpuTensor> {
        let bytes = (n_tokens * width * 4) as u64;
        if bytes > self.gpu.limits.max_buffer_size {
            return Err(CHECK.error(
                op,
                format!(
                    "[{n_tokens} × {width}] f32 is {bytes} bytes, more than the adapter's \
                     largest buffer ({}); pass fewer tokens",
                    self.gpu.limits.max_buffer_size
                ),
            ));
        }
        Ok(GpuTensor {
            buffer: self.pool.take(&self.gpu, op, bytes),
            n_tokens,
            width,
            pool: Some(self.pool.clone()),
        })
    }

    /// An elementwise kernel over `n` values: 64 per workgroup.
    fn elementwise(
        &self,
        op: &'static str,
        kernel: Kernel,
        params: &[u32],
        buffers: &[&wgpu::Buffer],
        n: usize,
    ) -> Result<()> {
        self.dispatch(op, kernel, params, buffers, n.div_ceil(64), 1)
    }

    /// `x · Wᵀ`; with `gate`, the gated FFN's hidden values act(gate) ⊙ (x · Wᵀ), the
    /// activation applied by the mat-vec kernel as it writes (decoding only: `gate` must be
    /// as wide as W has rows, and x at most MATVEC_MAX_TOKENS tokens). Decoding products
    /// without `gate` of the unit types take the unit kernels (`unit_products.rs`).
    fn product(
        &self,
        x: &GpuTensor,
        weight: &GpuWeight,
        gate: Option<(&GpuTensor, Activation)>,
    ) -> Result<GpuTensor> {
        let matrix = rows(weight, "matmul")?;
        CHECK.width("matmul", x, matrix.row_len, &weight.name)?;
        if gate.is_none() && self.takes_units(matrix.quant, x.n_tokens) {
            let mut outputs = self.unit_products(x, &[matrix])?;
            return outputs
                .pop()
                .ok_or_else(|| CHECK.error("matmul", "the unit product gave no output"));
        }
        let out = self.tensor("matmul", x.n_tokens, matrix.n_rows)?;
        if let Some((gate, _)) = gate {
            CHECK.same_shape("gated_ffn", gate, &out)?;
            if x.n_tokens > MATVEC_MAX_TOKENS {
                return Err(CHECK.error(
                    "gated_ffn",
                    format!("the gated product takes at most {MATVEC_MAX_TOKENS} tokens"),
                ));
            }
        }
        let gated = gate.map(|(_, act)| activation_code(act));
        let (k, m) = (matrix.row_len, matrix.n_rows);
        let subgroup = self.gpu.max_subgroup.filter(|_| self.subgroups);
        for window in self.token_windows("matmul", x.n_tokens, &[k * 4, m * 4])? {
            let n = window.len();
            let x_part = binding(&x.buffer, window.start * k * 4, n * k * 4);
            let out_part = binding(&out.buffer, window.start * m * 4, n * m * 4);
            let gate_part = gate.map(|(g, _)| binding(&g.buffer, window.start * m * 4, n * m * 4));
            for chunk in &matrix.chunks {
                let (kernel, params, workgroups, z) = if n <= MATVEC_MAX_TOKENS {
                    let (quant, rows) = (matrix.quant, self.matvec_rows);
                    let (kernel, rows_per_workgroup) = match subgroup {
                        Some(size) => (
                            Kernel::MatvecSubgroup { quant, rows, gated },
                            rows * 64 / size,
                        ),
                        None => (Kernel::Matvec { quant, rows, gated }, rows),
                    };
                    let params = u32s(&[
                        chunk.n_rows,
                        k / quant.matvec_dot().1,
                        k / 4,
                        matrix.row_bytes,
                        chunk.first_row,
                        m,
                    ]);
                    (
                        kernel,
                        params,
                        chunk.n_rows.div_ceil(rows_per_workgroup as usize),
                        n,
                    )
                } else {
                    // Tokens per workgroup: TOKENS in matmul*.wgsl.
                    const TOKENS: usize = 16;
                    let params =
                        u32s(&[chunk.n_rows, k / 4, n, matrix.row_bytes, chunk.first_row, m]);
                    let (kernel, workgroups) = match subgroup {
                        // As many rows per workgroup as the largest subgroups leave.
                        Some(size) => (
                            Kernel::MatmulSubgroup(matrix.quant),
                            chunk.n_rows.div_ceil(64 / size as usize),
                        ),
                        None => (Kernel::Matmul(matrix.quant), chunk.n_rows),
                    };
                    (kernel, params, workgroups, n.div_ceil(TOKENS))
                };
                let mut bindings = vec![
                    chunk.buffer.as_entire_buffer_binding(),
                    x_part.clone(),
                    out_part.clone(),
                ];
                bindings.extend(gate_part.clone());
                self.dispatch_bound(
                    "matmul",
                    (kernel, chunk.buffer.size()),
                    &params,
                    &bindings,
                    workgroups,
                    z,
                )?;
            }
        }
        Ok(out)
    }
}

/// Prints the kernel timings, where they were asked for (`timings.rs`).
impl Drop for WgpuBackend {
    fn drop(&mut self) {
        if let Some(report) = self.recorder.timings_report() {
            eprint!("{report}");
        }
    }
}

fn rows<'w>(weight: &'w GpuWeight, op: &'static str) -> Result<&'w RowMatrix> {
    match &weight.kind {
        WeightKind::Rows(matrix) => Ok(matrix),
        WeightKind::Values { .. } => {
            Err(CHECK.error(op, format!("{:?} is a vector, not a matrix", weight.name)))
        }
    }
}

fn values<'w>(weight: &'w GpuWeight, op: &'static str) -> Result<(&'w wgpu::Buffer, usize)> {
    match &weight.kind {
        WeightKind::Values { buffer, len } => Ok((buffer, *len)),
        WeightKind::Rows(_) => {
            Err(CHECK.error(op, format!("{:?} is a matrix, not a vector", weight.name)))
        }
    }
}

/// `len` bytes of `buffer` from `offset`.
fn binding(buffer: &wgpu::Buffer, offset: usize, len: usize) -> wgpu::BufferBinding<'_> {
    wgpu::BufferBinding {
        buffer,
        offset: offset as u64,
        size: std::num::NonZeroU64::new(len.max(4) as u64),
    }
}

fn u32s(values: &[usize]) -> Vec<u32> {
    values.iter().map(|&v| v as u32).collect()
}

/// The kernels' code for `act` (`activations.wgsl`).
fn activation_code(act: Activation) -> u32 {
    match act {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
    }
}

impl Backend for WgpuBackend {
    type Weight = GpuWeight;
    type Tensor = GpuTensor;
    type KvStorage = GpuKvStorage;
    type Pass<'p> = GpuPass<'p>;

    fn name(&self) -> &'static str {
        NAME
    }

    fn load_weight(&self, tensor: WeightTensor, usage: WeightUse) -> Result<GpuWeight> {
        let ty = tensor.ggml_type();
        let name = tensor.name().to_owned();
        let error = |message: String| CHECK.error("load_weight", format!("{name:?}: {message}"));
        let kind = match usage {
            WeightUse::Vector => {
                let values = plumb_ggml::dequantize_row_to_vec(ty, tensor.bytes())
                    .map_err(|e| error(e.to_string()))?;
                let words: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
                WeightKind::Values {
                    buffer: self.gpu.storage_init(&name, &words),
                    len: values.len(),
                }
            }
            WeightUse::Matrix | WeightUse::Embedding => {
                let quant = Quant::of(ty).ok_or_else(|| {
                    error(format!(
                        "{ty} has no wgpu kernel (--backend ref runs it); the wgpu backend \
                         reads {}",
                        quant::SUPPORTED.map(|t| t.to_string()).join(", ")
                    ))
                })?;
                let matrix = self
                    .uploaded
                    .rows(&self.gpu, &tensor, quant, self.max_binding)
                    .map_err(error)?;
                WeightKind::Rows(matrix)
            }
        };
        Ok(GpuWeight { name, kind })
    }

    fn new_kv_storage(&self, layout: &KvLayout) -> Result<GpuKvStorage> {
        for (il, layer) in layout.layers.iter().enumerate() {
            let (dk, dv) = (layer.head_dim_k, layer.head_dim_v);
            if dk > MAX_HEAD_DIM || dv > MAX_HEAD_DIM || dk % 2 != 0 || dv % 2 != 0 {
                return Err(CHECK.error(
                    "new_kv_storage",
                    format!(
                        "layer {il}'s heads are {dk} and {dv} wide; the wgpu attention kernel \
                         takes even widths up to {MAX_HEAD_DIM}"
                    ),
                ));
            }
            let bytes = (layer.n_slots * layer.k_width().max(layer.v_width()) * 2) as u64;
            if bytes > self.max_binding {
                return Err(CHECK.error(
                    "new_kv_storage",
                    format!(
                        "layer {il}'s {} KV slots take {bytes} bytes, more than the adapter \
                         binds ({}); use a smaller context or fewer sequences",
                        layer.n_slots, self.max_binding
                    ),
                ));
            }
        }
        Ok(GpuKvStorage::new(&self.gpu, layout))
    }

    fn copy_kv_blocks(&self, kv: &mut GpuKvStorage, copies: &[BlockCopy]) -> Result<()> {
        CHECK.block_copies(&kv.layer_shapes(), copies)?;
        let scratch = self.gpu.buffer(
            "kv block copy",
            kv.largest_copy(copies),
            wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        );
        self.recorder.record(&self.gpu, |encoder| {
            kv.copy_blocks(encoder, &scratch, copies)
        });
        Ok(())
    }

    fn begin_pass<'p>(&self, inputs: &'p PassInputs<'p>) -> Result<GpuPass<'p>> {
        Ok(GpuPass::new(&self.gpu, inputs))
    }

    fn upload(&self, n_tokens: usize, width: usize, values: Vec<f32>) -> Result<GpuTensor> {
        CHECK.host_values(n_tokens, width, &values)?;
        let words: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        Ok(GpuTensor {
            buffer: self.gpu.storage_init("upload", &words),
            n_tokens,
            width,
            pool: None,
        })
    }

    fn to_host(&self, x: &GpuTensor) -> Result<Vec<f32>> {
        let bytes = self
            .recorder
            .read(&self.gpu, &x.buffer, (x.len() * 4) as u64)
            .map_err(|e| CHECK.error("to_host", e))?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    fn embed(&self, table: &GpuWeight, pass: &GpuPass<'_>) -> Result<GpuTensor> {
        let matrix = rows(table, "embed")?;
        let tokens = pass.inputs.tokens;
        CHECK.embed_ids(&table.name, matrix.n_rows, tokens)?;
        let out = self.tensor("embed", tokens.len(), matrix.row_len)?;
        let k4 = matrix.row_len / 4;
        for chunk in &matrix.chunks {
            let params = u32s(&[
                tokens.len(),
                k4,
                matrix.row_bytes,
                chunk.first_row,
                chunk.n_rows,
            ]);
            self.dispatch(
                "embed",
                Kernel::Embed(matrix.quant),
                &params,
                &[&chunk.buffer, &pass.tokens, &out.buffer],
                (tokens.len() * k4).div_ceil(64),
                1,
            )?;
        }
        Ok(out)
    }

    fn rms_norm(&self, x: &GpuTensor, weight: &GpuWeight, eps: f32) -> Result<GpuTensor> {
        let (buffer, len) = values(weight, "rms_norm")?;
        CHECK.norm_groups(x, len)?;
        let out = self.tensor("rms_norm", x.n_tokens, x.width)?;
        let n_groups = x.len() / len;
        let params = [n_groups as u32, len as u32, eps.to_bits()];
        self.dispatch(
            "rms_norm",
            Kernel::RmsNorm,
            &params,
            &[&x.buffer, buffer, &out.buffer],
            n_groups,
            1,
        )?;
        Ok(out)
    }

    fn matmul(&self, x: &GpuTensor, weight: &GpuWeight) -> Result<GpuTensor> {
        self.product(x, weight, None)
    }

    fn add_bias(&self, x: GpuTensor, bias: &GpuWeight) -> Result<GpuTensor> {
        let (buffer, len) = values(bias, "add_bias")?;
        CHECK.width("add_bias", &x, len, &bias.name)?;
        let params = u32s(&[x.len(), x.width]);
        self.elementwise(
            "add_bias",
            Kernel::AddBias,
            &params,
            &[&x.buffer, buffer],
            x.len(),
        )?;
        Ok(x)
    }

    fn scale(&self, x: GpuTensor, factor: f32) -> Result<GpuTensor> {
        let params = [x.len() as u32, factor.to_bits()];
        self.elementwise("scale", Kernel::Scale, &params, &[&x.buffer], x.len())?;
        Ok(x)
    }

    fn rope(
        &self,
        x: GpuTensor,
        head_dim: usize,
        rope: &Rope,
        pass: &GpuPass<'_>,
    ) -> Result<GpuTensor> {
        CHECK.rope(&x, head_dim, &pass.inputs.positions, rope)?;
        let n_pairs = rope.n_rot / 2;
        let angles = pass.angles(&self.gpu, rope);
        let neox = match rope.style {
            RopeStyle::Normal => 0,
            RopeStyle::Neox => 1,
        };
        let params = u32s(&[x.n_tokens, x.width, head_dim, n_pairs, neox]);
        let n = x.n_tokens * (x.width / head_dim) * n_pairs;
        self.elementwise("rope", Kernel::Rope, &params, &[&x.buffer, &angles], n)?;
        Ok(x)
    }

    fn store_kv(
        &self,
        k: &GpuTensor,
        v: &GpuTensor,
        kv: &mut GpuKvStorage,
        layer: usize,
        pass: &GpuPass<'_>,
    ) -> Result<()> {
        CHECK.store_kv(k, v, &kv.layer_shapes(), layer, pass.inputs)?;
        let cache = &kv.layers[layer];
        let (k_words, v_words) = (cache.shape.k_width() / 2, cache.shape.v_width() / 2);
        let params = u32s(&[k.n_tokens, k_words, v_words]);
        let slots = &pass.groups[cache.shape.group].slots;
        self.elementwise(
            "store_kv",
            Kernel::StoreKv,
            &params,
            &[&k.buffer, &v.buffer, slots, &cache.k, &cache.v],
            k.n_tokens * k_words.max(v_words),
        )
    }

    fn attention(
        &self,
        q: &GpuTensor,
        kv: &GpuKvStorage,
        step: &AttentionStep,
        pass: &GpuPass<'_>,
    ) -> Result<GpuTensor> {
        CHECK.attention(q, &kv.layer_shapes(), step, pass.inputs)?;
        if step.softcap.is_some() {
            return Err(CHECK.error(
                "attention",
                "soft-capped attention scores (gemma2) are not implemented on wgpu yet",
            ));
        }
        let cache = &kv.layers[step.layer];
        let shape = &cache.shape;
        let tables = &pass.groups[shape.group];
        let out = self.tensor("attention", q.n_tokens, step.n_head * shape.head_dim_v)?;
        let mut params = u32s(&[
            q.n_tokens,
            step.n_head,
            step.n_head / shape.n_head_kv,
            shape.head_dim_k,
            shape.head_dim_v,
            shape.window.unwrap_or(0),
            tables.block_shift as usize,
            tables.stride,
            shape.k_width() / 2,
            shape.v_width() / 2,
        ]);
        params.push(step.scale.to_bits());
        self.dispatch(
            "attention",
            Kernel::Attention,
            &params,
            &[
                &q.buffer,
                &cache.k,
                &cache.v,
                &pass.places,
                &tables.tables,
                &out.buffer,
            ],
            q.n_tokens * step.n_head,
            1,
        )?;
        Ok(out)
    }

    fn gated_activation(
        &self,
        gate: &GpuTensor,
        up: &GpuTensor,
        act: Activation,
    ) -> Result<GpuTensor> {
        CHECK.same_shape("gated_activation", gate, up)?;
        let out = self.tensor("gated_activation", gate.n_tokens, gate.width)?;
        self.elementwise(
            "gated_activation",
            Kernel::GatedActivation,
            &[gate.len() as u32, activation_code(act)],
            &[&gate.buffer, &up.buffer, &out.buffer],
            gate.len(),
        )?;
        Ok(out)
    }

    fn add(&self, a: &GpuTensor, b: &GpuTensor) -> Result<GpuTensor> {
        CHECK.same_shape("add", a, b)?;
        let out = self.tensor("add", a.n_tokens, a.width)?;
        self.elementwise(
            "add",
            Kernel::Add,
            &[a.len() as u32],
            &[&a.buffer, &b.buffer, &out.buffer],
            a.len(),
        )?;
        Ok(out)
    }

    /// When decoding, the products of the unit kernels' type in one dispatch
    /// (`unit_products.rs`): all three where they are of one type (Q4_K_M's V is Q6_K in some
    /// layers), the others one dispatch each.
    fn qkv(
        &self,
        x: &GpuTensor,
        q: Projection<'_, GpuWeight>,
        k: Projection<'_, GpuWeight>,
        v: Projection<'_, GpuWeight>,
    ) -> Result<[GpuTensor; 3]> {
        let projections = [q, k, v];
        let mut matrices = Vec::with_capacity(3);
        for p in &projections {
            let matrix = rows(p.weight, "qkv")?;
            CHECK.width("qkv", x, matrix.row_len, &p.weight.name)?;
            matrices.push(matrix);
        }
        let units: Vec<usize> = (0..3)
            .filter(|&i| self.takes_units(matrices[i].quant, x.n_tokens))
            .collect();
        let grouped: Vec<usize> = match units.first() {
            Some(&first) => units
                .iter()
                .copied()
                .filter(|&i| matrices[i].quant == matrices[first].quant)
                .collect(),
            None => Vec::new(),
        };
        let together: Vec<&RowMatrix> = grouped.iter().map(|&i| matrices[i]).collect();
        let mut products = self.unit_products(x, &together)?.into_iter();
        let mut out = Vec::with_capacity(3);
        for (i, p) in projections.into_iter().enumerate() {
            let y = match grouped.contains(&i) {
                true => {
                    let y = products.next().ok_or_else(|| {
                        CHECK.error("qkv", "the grouped products gave too few outputs")
                    })?;
                    match p.bias {
                        Some(bias) => self.add_bias(y, bias)?,
                        None => y,
                    }
                }
                false => self.project(x, p)?,
            };
            out.push(y);
        }
        let [q, k, v]: [GpuTensor; 3] = out
            .try_into()
            .map_err(|_| CHECK.error("qkv", "three projections gave other than three outputs"))?;
        Ok([q, k, v])
    }

    /// When decoding without biases: the gate and up projections and the activation in one
    /// dispatch where the unit kernels take both (`unit_products.rs`), else the gate's
    /// product, then up's with the activation applied as it writes; otherwise the primitives.
    fn gated_ffn(&self, x: &GpuTensor, ffn: &GatedFfnWeights<'_, GpuWeight>) -> Result<GpuTensor> {
        let decoding = x.n_tokens <= MATVEC_MAX_TOKENS && ffn.up.bias.is_none();
        let hidden = if decoding {
            let (gate, up) = (
                rows(ffn.gate.weight, "gated_ffn")?,
                rows(ffn.up.weight, "gated_ffn")?,
            );
            let together = ffn.gate.bias.is_none()
                && self.takes_units(gate.quant, x.n_tokens)
                && self.takes_units(up.quant, x.n_tokens)
                && gate.quant == up.quant
                && (gate.row_len, gate.n_rows) == (up.row_len, up.n_rows);
            if together {
                CHECK.width("gated_ffn", x, gate.row_len, &ffn.gate.weight.name)?;
                self.gated_unit_products(x, gate, up, activation_code(ffn.activation))?
            } else {
                let gate = self.project(x, ffn.gate)?;
                self.product(x, ffn.up.weight, Some((&gate, ffn.activation)))?
            }
        } else {
            let gate = self.project(x, ffn.gate)?;
            let up = self.project(x, ffn.up)?;
            self.gated_activation(&gate, &up, ffn.activation)?
        };
        self.project(&hidden, ffn.down)
    }

    /// One kernel: the sum, and its RMSNorm from the values as they are written.
    fn add_rms_norm(
        &self,
        a: &GpuTensor,
        b: &GpuTensor,
        weight: &GpuWeight,
        eps: f32,
    ) -> Result<(GpuTensor, GpuTensor)> {
        CHECK.same_shape("add_rms_norm", a, b)?;
        let (buffer, len) = values(weight, "add_rms_norm")?;
        CHECK.norm_groups(a, len)?;
        let sum = self.tensor("add_rms_norm", a.n_tokens, a.width)?;
        let out = self.tensor("add_rms_norm", a.n_tokens, a.width)?;
        let n_groups = a.len() / len;
        self.dispatch(
            "add_rms_norm",
            Kernel::AddRmsNorm,
            &[n_groups as u32, len as u32, eps.to_bits()],
            &[&a.buffer, &b.buffer, buffer, &sum.buffer, &out.buffer],
            n_groups,
            1,
        )?;
        Ok((sum, out))
    }

    /// One kernel (`rope_store_kv.wgsl`) where the keys are heads of the queries' width, as
    /// the cache holds them; otherwise the primitives.
    fn rope_store_kv(
        &self,
        q: GpuTensor,
        k: GpuTensor,
        v: &GpuTensor,
        kv: &mut GpuKvStorage,
        layer: usize,
        head_dim: usize,
        rope: &Rope,
        pass: &GpuPass<'_>,
    ) -> Result<(GpuTensor, GpuTensor)> {
        let positions = &pass.inputs.positions;
        CHECK.rope(&q, head_dim, positions, rope)?;
        CHECK.rope(&k, head_dim, positions, rope)?;
        CHECK.store_kv(&k, v, &kv.layer_shapes(), layer, pass.inputs)?;
        if kv.layers[layer].shape.head_dim_k != head_dim {
            let q = self.rope(q, head_dim, rope, pass)?;
            let k = self.rope(k, head_dim, rope, pass)?;
            self.store_kv(&k, v, kv, layer, pass)?;
            return Ok((q, k));
        }
        let cache = &kv.layers[layer];
        let angles = pass.angles(&self.gpu, rope);
        let neox = match rope.style {
            RopeStyle::Normal => 0,
            RopeStyle::Neox => 1,
        };
        let (k_words, v_words) = (cache.shape.k_width() / 2, cache.shape.v_width() / 2);
        let n_head = q.width / head_dim;
        let n_pairs = rope.n_rot / 2;
        let params = u32s(&[
            q.n_tokens, n_head, head_dim, n_pairs, neox, k_words, v_words,
        ]);
        let k_out = self.tensor("rope_store_kv", k.n_tokens, k.width)?;
        let slots = &pass.groups[cache.shape.group].slots;
        self.elementwise(
            "rope_store_kv",
            Kernel::RopeStoreKv,
            &params,
            &[
                &q.buffer,
                &k.buffer,
                &v.buffer,
                &angles,
                slots,
                &k_out.buffer,
                &cache.k,
                &cache.v,
            ],
            q.n_tokens * (n_head * n_pairs).max(k_words).max(v_words),
        )?;
        Ok((q, k_out))
    }

    fn output_rows(&self, x: &GpuTensor, pass: &GpuPass<'_>) -> Result<GpuTensor> {
        let rows = pass.inputs.output_rows;
        CHECK.rows(x, rows)?;
        let out = self.tensor("output_rows", rows.len(), x.width)?;
        self.elementwise(
            "output_rows",
            Kernel::SelectRows,
            &u32s(&[out.len(), x.width]),
            &[&x.buffer, &pass.output_rows, &out.buffer],
            out.len(),
        )?;
        Ok(out)
    }

    /// On the device: only the `k` pairs of each row are read back.
    fn top_k(&self, logits: &GpuTensor, k: usize) -> Result<Vec<Vec<(u32, f32)>>> {
        let k = k.min(logits.width);
        let n_rows = logits.n_tokens;
        if k == 0 || n_rows == 0 {
            return Ok(vec![Vec::new(); n_rows]);
        }
        let out = self
            .gpu
            .buffer("top_k", (n_rows * k * 8) as u64, TENSOR_USAGE);
        let width = logits.width;
        for window in self.token_windows("top_k", n_rows, &[width * 4])? {
            let n = window.len();
            self.dispatch_bound(
                "top_k",
                (Kernel::TopK, 0),
                &u32s(&[n, width, k, window.start]),
                &[
                    binding(&logits.buffer, window.start * width * 4, n * width * 4),
                    out.as_entire_buffer_binding(),
                ],
                n,
                1,
            )?;
        }
        let bytes = self
            .recorder
            .read(&self.gpu, &out, (n_rows * k * 8) as u64)
            .map_err(|e| CHECK.error("top_k", e))?;
        let pairs: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        Ok(pairs
            .chunks_exact(2 * k)
            .map(|row| {
                row.chunks_exact(2)
                    .map(|p| (p[0], f32::from_bits(p[1])))
                    .collect()
            })
            .collect())
    }
}
