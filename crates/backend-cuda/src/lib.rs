//! The CUDA backend: weights, activations and the KV cache (in f16) live on one GPU.
//!
//! CUDA is loaded at run time (the driver, NVRTC, cuBLAS), so plumb builds and runs without
//! it; [`CudaBackend::available`] says whether this machine can use this backend. Kernels are
//! CUDA C compiled by NVRTC for the device at start-up and cached on disk (see `nvrtc`).
//! Every op is queued on one stream. A pass's bookkeeping (tokens, positions, KV slots, block
//! tables, output rows) goes to the device in one copy at [`Backend::begin_pass`]; only
//! [`Backend::to_host`] and [`Backend::top_k`] wait for the device. Decode steps are
//! recorded as CUDA graphs and replayed (see `graphs`), their activations in buffers reused
//! from step to step (see `pool`); on Hopper and later, unless `PLUMB_CUDA_PDL=0`, each
//! kernel may start before the one before it has ended (programmatic dependent launch, see
//! `launch`).
//!
//! It differs from the f32 reference by the f16 rounding of keys and values and by the
//! matrix kernels' own roundings, which `plumb verify --backend cuda` bounds layer by layer.

mod activations_q8;
mod attention;
mod error;
mod graphs;
mod kernels;
mod kv_storage;
mod launch;
mod matmul;
mod nvrtc;
mod ops;
mod pass_inputs;
mod pool;
mod q6_k_layout;
mod rope_table;
mod tensor;
mod weight;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cudarc::driver::{sys::CUdevice_attribute, CudaContext, CudaSlice, CudaStream};
use plumb_backend_ref::Checks;
use plumb_gguf::GgmlType;
use plumb_model::{
    Activation, Activations, AttentionStep, Backend, BlockCopy, GatedFfnWeights, KvLayout,
    PassInputs, Projection, Result, Rope, WeightTensor, WeightUse,
};

pub use graphs::{GraphShape, GRAPHS_ENV};
pub use kv_storage::CudaKvStorage;
pub use launch::PDL_ENV;
pub use nvrtc::KERNELS_ENV;
pub use pass_inputs::CudaPass;
pub use tensor::CudaTensor;
pub use weight::CudaWeight;

use attention::Attention;
use error::{error, failed, NAME};
use graphs::Graphs;
use kernels::Kernels;
use matmul::Matmul;
use ops::Ops;
use pool::Pool;
use rope_table::RopeTables;
use weight::{DeviceWeight, WeightKind};

const CHECK: Checks = Checks { backend: NAME };
/// The largest `k` that [`Backend::top_k`] finds on the device (one pass over the row per
/// entry); a larger one copies the logits to the host.
const MAX_DEVICE_TOP_K: usize = 64;

/// The CUDA backend, on one device.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    /// The activations' buffers (see `pool`).
    pool: Arc<Pool>,
    kernels: Kernels,
    matmul: Matmul,
    rope_tables: RopeTables,
    graphs: Graphs,
    /// A counter a row of the kernels that quantize by slices (`activations_q8`).
    slice_counters: CudaSlice<u32>,
    /// Whether the device has programmatic dependent launch (Hopper and later).
    has_pdl: bool,
    n_sm: usize,
    /// The device's name, for reports.
    device_name: String,
    /// Whether a weight of a type with 8-bit kernels was loaded for products: then the norms
    /// of a decode step quantize the rows they write to 8 bits, for the products after them.
    norms_q8: AtomicBool,
}

impl CudaBackend {
    /// Whether a CUDA driver and at least one device are present.
    pub fn available() -> bool {
        device_count().is_ok_and(|n| n > 0)
    }

    /// The number of CUDA devices, or why there are none to be had (no driver library, a
    /// driver that fails to start).
    pub fn device_count() -> Result<usize> {
        device_count()
    }

    /// A backend on device `ordinal`, its kernels compiled (or taken from the cache).
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(error(
                "new",
                format!("no CUDA device {ordinal}: this machine has {n}"),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(failed("new"))?;
        // One stream orders every op, so cudarc's per-buffer events (for sharing buffers
        // between streams) would only add two driver calls to each launch.
        // SAFETY: no buffer exists yet, and none is ever used on another stream.
        unsafe { ctx.disable_event_tracking() };
        // A stream of its own: the legacy default stream cannot be captured into a graph.
        let stream = ctx.new_stream().map_err(failed("new"))?;
        let device_name = ctx.name().map_err(failed("new"))?;
        let (major, minor) = ctx.compute_capability().map_err(failed("new"))?;
        let n_sm = ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(failed("new"))?;
        let n_sm = usize::try_from(n_sm).unwrap_or(1).max(1);
        let pdl = launch::pdl_from_env(major);
        tracing::info!(device = ordinal, name = %device_name, arch = format!("{major}.{minor}"), n_sm, pdl, "cuda backend");
        Ok(CudaBackend {
            kernels: Kernels::load(&ctx, pdl)?,
            matmul: Matmul::new(&ctx, pdl, n_sm)?,
            rope_tables: RopeTables::default(),
            graphs: Graphs::from_env(),
            has_pdl: major >= 9,
            n_sm,
            device_name,
            pool: Pool::new(&stream),
            slice_counters: activations_q8::slice_counters(&stream)?,
            stream,
            norms_q8: AtomicBool::new(false),
        })
    }

    /// This backend with decode steps recorded and replayed as CUDA graphs or not (the
    /// default is on, unless `PLUMB_CUDA_GRAPHS=0`).
    pub fn with_graphs(mut self, enabled: bool) -> CudaBackend {
        self.graphs = Graphs::new(enabled);
        self
    }

    /// This backend with its kernels launched with programmatic dependent launch or not, where
    /// the device has it (the default is on, unless `PLUMB_CUDA_PDL=0`).
    pub fn with_pdl(mut self, enabled: bool) -> CudaBackend {
        let pdl = enabled && self.has_pdl;
        self.kernels.pdl = pdl;
        self.matmul.set_pdl(pdl);
        self
    }

    /// Whether kernels are launched with programmatic dependent launch.
    pub fn pdl(&self) -> bool {
        self.kernels.pdl
    }

    /// How many passes were replayed from CUDA graphs so far.
    pub fn graph_replays(&self) -> usize {
        self.graphs.replays()
    }

    /// The shape of the last decode step recorded as a CUDA graph, where the driver says it.
    pub fn last_recording(&self) -> Option<GraphShape> {
        self.graphs.last_shape()
    }

    /// The device's name, as the driver gives it ("NVIDIA H200").
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    fn ops(&self) -> Ops<'_> {
        Ops {
            stream: &self.stream,
            pool: &self.pool,
            kernels: &self.kernels,
            slice_counters: &self.slice_counters,
        }
    }

    /// x · Wᵀ for each of `weights`, which share x's 8-bit quantization where they take one
    /// (x's own 8-bit rows where the kernel that wrote x made them).
    fn matmuls<const N: usize>(
        &self,
        x: &CudaTensor,
        weights: [&CudaWeight; N],
    ) -> Result<[CudaTensor; N]> {
        const OP: &str = "matmul";
        let mut ws = Vec::with_capacity(N);
        let mut outs = Vec::with_capacity(N);
        for weight in weights {
            let w = matrix(OP, weight)?;
            CHECK.width(OP, x, w.k, &weight.name)?;
            ws.push(w);
            outs.push(CudaTensor::uninit(&self.pool, OP, x.n_tokens(), w.m)?);
        }
        if x.n_tokens() > 0 {
            let mut products: Vec<_> = ws
                .iter()
                .copied()
                .zip(outs.iter_mut().map(|o| o.data_mut()))
                .collect();
            self.matmul
                .run(&self.stream, x.data(), x.q8(), x.n_tokens(), &mut products)?;
        }
        outs.try_into()
            .map_err(|_| error(OP, "one output per weight"))
    }

    fn attention_kernels(&self) -> Attention<'_> {
        Attention {
            stream: &self.stream,
            pool: &self.pool,
            kernels: &self.kernels,
            n_sm: self.n_sm,
        }
    }
}

fn device_count() -> Result<usize> {
    // SAFETY: only tries to open the library; without this check the first driver call
    // would panic where there is none.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(error(
            "new",
            "no CUDA driver: libcuda.so cannot be loaded (no NVIDIA driver installed, or its \
             directory is not on LD_LIBRARY_PATH)",
        ));
    }
    let n = CudaContext::device_count().map_err(failed("new"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// The f32 values of vector weight `w`, for op `op`.
fn vector<'w>(op: &'static str, w: &'w CudaWeight) -> Result<&'w CudaSlice<f32>> {
    w.vector()
        .ok_or_else(|| error(op, format!("{:?} is a matrix, not a vector", w.name)))
}

fn matrix<'w>(op: &'static str, w: &'w CudaWeight) -> Result<&'w DeviceWeight> {
    w.matrix()
        .ok_or_else(|| error(op, format!("{:?} is a vector, not a matrix", w.name)))
}

/// The f32 values of `p`'s bias, if it has one, checked against the projection's output `y`.
fn bias<'w>(
    op: &'static str,
    p: Projection<'w, CudaWeight>,
    y: &CudaTensor,
) -> Result<Option<&'w CudaSlice<f32>>> {
    let Some(b) = p.bias else {
        return Ok(None);
    };
    let values = vector(op, b)?;
    CHECK.width(op, y, values.len(), &b.name)?;
    Ok(Some(values))
}

impl Backend for CudaBackend {
    type Weight = CudaWeight;
    type Tensor = CudaTensor;
    type KvStorage = CudaKvStorage;
    type Pass<'p> = CudaPass<'p>;

    fn name(&self) -> &'static str {
        NAME
    }

    fn load_weight(&self, tensor: WeightTensor, usage: WeightUse) -> Result<CudaWeight> {
        const OP: &str = "load_weight";
        let (ty, name) = (tensor.ggml_type(), tensor.name().to_owned());
        let kind = if usage == WeightUse::Vector {
            let values = plumb_ggml::dequantize_row_to_vec(ty, tensor.bytes())
                .map_err(|e| error(OP, format!("{name:?}: {e}")))?;
            let values = if values.is_empty() { vec![0.0] } else { values };
            WeightKind::Vector(self.stream.clone_htod(&values).map_err(failed(OP))?)
        } else {
            if !Matmul::supports(ty) {
                return Err(error(
                    OP,
                    format!(
                        "tensor {name:?} is {ty}, which the cuda backend has no kernel for \
                         (--backend cpu runs it)"
                    ),
                ));
            }
            // Q6_K blocks go up repacked 16-byte aligned, as its kernels read them.
            let data = match ty {
                GgmlType::Q6_K => Cow::Owned(
                    q6_k_layout::to_device_layout(tensor.bytes())
                        .map_err(|e| error(OP, format!("tensor {name:?}: {e}")))?,
                ),
                _ => Cow::Borrowed(tensor.bytes()),
            };
            // The kernels may read a few bytes past the last block (see WEIGHT_PADDING).
            let mut bytes = self
                .stream
                .alloc_zeros::<u8>(data.len() + matmul::WEIGHT_PADDING)
                .map_err(failed(OP))?;
            self.stream
                .memcpy_htod(&data[..], &mut bytes.slice_mut(..data.len()))
                .map_err(failed(OP))?;
            // A norm's output feeds products (Q/K/V, gate/up, the output head); which ones is
            // not known where the norm runs, so the norms quantize once any weight would take
            // their 8-bit rows (every weight of a Q4_K_M model; none of an F16 one, whose
            // norms then write only the f32 rows).
            if usage == WeightUse::Matrix && matmul::has_matvec_q8(ty) {
                self.norms_q8.store(true, Ordering::Relaxed);
            }
            WeightKind::Matrix(DeviceWeight {
                ty,
                k: tensor.row_len(),
                m: tensor.n_rows(),
                bytes,
            })
        };
        Ok(CudaWeight { name, kind })
    }

    fn new_kv_storage(&self, layout: &KvLayout) -> Result<CudaKvStorage> {
        CudaKvStorage::new(&self.stream, layout)
    }

    fn copy_kv_blocks(&self, kv: &mut CudaKvStorage, copies: &[BlockCopy]) -> Result<()> {
        CHECK.block_copies(&kv.shapes(), copies)?;
        kv.copy_blocks(&self.stream, &self.kernels, copies)
    }

    fn begin_pass<'p>(&self, inputs: &'p PassInputs<'p>) -> Result<CudaPass<'p>> {
        self.graphs.begin_pass(&self.stream, &self.pool, inputs)
    }

    fn replay_pass(&self, pass: &CudaPass<'_>, kv: &CudaKvStorage) -> Result<Option<CudaTensor>> {
        let scratch = self.matmul.scratch(&self.stream);
        self.graphs.replay(&self.pool, pass, kv, scratch)
    }

    fn record_pass(&self, pass: &CudaPass<'_>, kv: &CudaKvStorage) -> Result<bool> {
        let scratch = self.matmul.scratch(&self.stream);
        self.graphs.record(&self.pool, pass, kv, scratch)
    }

    fn finish_recording(
        &self,
        _pass: &CudaPass<'_>,
        logits: Result<CudaTensor>,
    ) -> Result<Option<CudaTensor>> {
        let scratch = self.matmul.scratch(&self.stream);
        self.graphs.finish(&self.pool, logits, scratch)
    }

    fn upload(&self, n_tokens: usize, width: usize, values: Vec<f32>) -> Result<CudaTensor> {
        CHECK.host_values(n_tokens, width, &values)?;
        CudaTensor::from_host(&self.pool, n_tokens, width, &values)
    }

    fn to_host(&self, x: &CudaTensor) -> Result<Vec<f32>> {
        x.to_vec(&self.stream, "to_host")
    }

    fn embed(&self, table: &CudaWeight, pass: &CudaPass<'_>) -> Result<CudaTensor> {
        const OP: &str = "embed";
        let w = matrix(OP, table)?;
        CHECK.embed_ids(&table.name, w.m, pass.inputs.tokens)?;
        let mut out = CudaTensor::uninit(&self.pool, OP, pass.n_tokens(), w.k)?;
        if pass.n_tokens() > 0 {
            self.matmul
                .get_rows(&self.stream, w, &pass.tokens(), out.data_mut())?;
        }
        Ok(out)
    }

    fn rms_norm(&self, x: &CudaTensor, weight: &CudaWeight, eps: f32) -> Result<CudaTensor> {
        let values = vector("rms_norm", weight)?;
        CHECK.norm_groups(x, values.len())?;
        self.ops()
            .rms_norm(x, values, eps, self.norms_q8.load(Ordering::Relaxed))
    }

    fn matmul(&self, x: &CudaTensor, weight: &CudaWeight) -> Result<CudaTensor> {
        let [y] = self.matmuls(x, [weight])?;
        Ok(y)
    }

    fn add_bias(&self, x: CudaTensor, bias: &CudaWeight) -> Result<CudaTensor> {
        let values = vector("add_bias", bias)?;
        CHECK.width("add_bias", &x, values.len(), &bias.name)?;
        self.ops().add_bias(x, values)
    }

    fn scale(&self, x: CudaTensor, factor: f32) -> Result<CudaTensor> {
        self.ops().scale(x, factor)
    }

    fn rope(
        &self,
        x: CudaTensor,
        head_dim: usize,
        rope: &Rope,
        pass: &CudaPass<'_>,
    ) -> Result<CudaTensor> {
        CHECK.rope(&x, head_dim, &pass.inputs.positions, rope)?;
        if rope.n_rot < 2 || x.is_empty() {
            return Ok(x);
        }
        let inv_freq = self.rope_tables.get(&self.stream, rope)?;
        self.ops()
            .rope(x, head_dim, &pass.positions(), rope, &inv_freq)
    }

    fn store_kv(
        &self,
        k: &CudaTensor,
        v: &CudaTensor,
        kv: &mut CudaKvStorage,
        layer: usize,
        pass: &CudaPass<'_>,
    ) -> Result<()> {
        CHECK.store_kv(k, v, &kv.shapes(), layer, pass.inputs)?;
        let group = kv.layers[layer].shape.group;
        self.attention_kernels()
            .store_kv(k, v, &mut kv.layers[layer], &pass.group(group).slots)
    }

    fn attention(
        &self,
        q: &CudaTensor,
        kv: &CudaKvStorage,
        step: &AttentionStep,
        pass: &CudaPass<'_>,
    ) -> Result<CudaTensor> {
        CHECK.attention(q, &kv.shapes(), step, pass.inputs)?;
        if step.softcap.is_some() {
            return Err(error(
                "attention",
                "soft-capped attention scores (gemma2) are not implemented on CUDA yet",
            ));
        }
        let layer = &kv.layers[step.layer];
        let tables = pass.inputs.kv.layer(step.layer);
        self.attention_kernels().run(
            q,
            layer,
            step,
            tables.block_size(),
            pass.inputs.places,
            &pass.positions(),
            &pass.group(layer.shape.group),
        )
    }

    fn gated_activation(
        &self,
        gate: &CudaTensor,
        up: &CudaTensor,
        act: Activation,
    ) -> Result<CudaTensor> {
        CHECK.same_shape("gated_activation", gate, up)?;
        self.ops().gated_activation(gate, up, act)
    }

    fn add(&self, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        CHECK.same_shape("add", a, b)?;
        self.ops().add(a, b)
    }

    fn output_rows(&self, x: &CudaTensor, pass: &CudaPass<'_>) -> Result<CudaTensor> {
        let rows = pass.inputs.output_rows;
        CHECK.rows(x, rows)?;
        self.ops().select_rows(x, &pass.output_rows(), rows.len())
    }

    fn qkv(
        &self,
        x: &CudaTensor,
        q: Projection<'_, CudaWeight>,
        k: Projection<'_, CudaWeight>,
        v: Projection<'_, CudaWeight>,
    ) -> Result<[CudaTensor; 3]> {
        let [yq, yk, yv] = self.matmuls(x, [q.weight, k.weight, v.weight])?;
        let biased = |y, p: Projection<'_, CudaWeight>| match p.bias {
            Some(b) => self.add_bias(y, b),
            None => Ok(y),
        };
        Ok([biased(yq, q)?, biased(yk, k)?, biased(yv, v)?])
    }

    fn gated_ffn(
        &self,
        x: &CudaTensor,
        ffn: &GatedFfnWeights<'_, CudaWeight>,
    ) -> Result<CudaTensor> {
        const OP: &str = "gated_ffn";
        let [gate, up] = self.matmuls(x, [ffn.gate.weight, ffn.up.weight])?;
        CHECK.same_shape(OP, &gate, &up)?;
        // The biases are added inside the activation's kernel, which also quantizes its output
        // to 8 bits where the down projection takes them.
        let (gate_bias, up_bias) = (bias(OP, ffn.gate, &gate)?, bias(OP, ffn.up, &up)?);
        let q8 = matmul::has_matvec_q8(matrix(OP, ffn.down.weight)?.ty);
        let hidden =
            self.ops()
                .gated_activation_bias(&gate, gate_bias, &up, up_bias, ffn.activation, q8)?;
        self.project(&hidden, ffn.down)
    }

    fn add_rms_norm(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        weight: &CudaWeight,
        eps: f32,
    ) -> Result<(CudaTensor, CudaTensor)> {
        CHECK.same_shape("add_rms_norm", a, b)?;
        let values = vector("add_rms_norm", weight)?;
        CHECK.norm_groups(a, values.len())?;
        self.ops()
            .add_rms_norm(a, b, values, eps, self.norms_q8.load(Ordering::Relaxed))
    }

    fn rope_store_kv(
        &self,
        q: CudaTensor,
        k: CudaTensor,
        v: &CudaTensor,
        kv: &mut CudaKvStorage,
        layer: usize,
        head_dim: usize,
        rope: &Rope,
        pass: &CudaPass<'_>,
    ) -> Result<(CudaTensor, CudaTensor)> {
        let positions = &pass.inputs.positions;
        CHECK.rope(&q, head_dim, positions, rope)?;
        CHECK.rope(&k, head_dim, positions, rope)?;
        CHECK.store_kv(&k, v, &kv.shapes(), layer, pass.inputs)?;
        let store = &mut kv.layers[layer];
        if rope.n_rot < 2 || store.shape.head_dim_k != head_dim {
            // Nothing to rotate, or keys not in heads of the queries' width: the primitives.
            let q = self.rope(q, head_dim, rope, pass)?;
            let k = self.rope(k, head_dim, rope, pass)?;
            self.store_kv(&k, v, kv, layer, pass)?;
            return Ok((q, k));
        }
        let inv_freq = self.rope_tables.get(&self.stream, rope)?;
        let slots = pass.group(store.shape.group).slots;
        self.attention_kernels().rope_store_kv(
            q,
            k,
            v,
            store,
            head_dim,
            rope,
            &inv_freq,
            &pass.positions(),
            &slots,
        )
    }

    fn top_k(&self, logits: &CudaTensor, k: usize) -> Result<Vec<Vec<(u32, f32)>>> {
        if k > MAX_DEVICE_TOP_K {
            let width = logits.width();
            let values = self.to_host(logits)?;
            return Ok(values
                .chunks_exact(width.max(1))
                .map(|row| plumb_model::top_k(row, k))
                .collect());
        }
        self.ops().top_k(logits, k.min(logits.width()))
    }
}
