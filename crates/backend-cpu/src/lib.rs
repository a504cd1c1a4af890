//! The fast CPU backend, plumb's default.
//!
//! Weights stay memory-mapped in their quantized form (a server also keeps them packed for the
//! GEMM: [`CpuBackend::with_packed_weights`]). Matrix products quantize the
//! activations once to the weight type's 8-bit partner format and use the integer SIMD kernels
//! of [`plumb_ggml::DotKernel`], chosen at run time for this CPU. The f32 kernels (attention,
//! RMSNorm, the gated activations) are written once over vectors of lanes (`lanes`) and run at
//! the same instruction set, [`plumb_ggml::Isa`]. All ops run on a persistent [`ThreadPool`];
//! results do not depend on the thread count. The KV cache is f16 by default.
//!
//! It differs from the f32 reference only by llama.cpp's own roundings (8-bit activations,
//! f16 keys and values), which `plumb verify --backend cpu` bounds layer by layer.

mod attention;
mod kv_rotation;
mod kv_storage;
mod lanes;
mod matmul;
mod ops;
mod outliers;
mod pool;
mod rope_angles;
mod row_kernels;
mod shared_out;
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub mod web_threads;

use std::sync::Arc;

use plumb_backend_ref::{Checks, HostTensor};
use plumb_ggml::DotKernel;
use plumb_model::{
    Activation, AttentionStep, Backend, BlockCopy, KvLayout, PassInputs, Result, Rope,
    WeightTensor, WeightUse,
};

pub use kv_storage::{CpuKvStorage, KvCacheType};

use attention::LayerPass;
use matmul::Matrix;
use pool::ThreadPool;
use rope_angles::RopeAngles;
use row_kernels::RowKernels;

const NAME: &str = "cpu";
const CHECK: Checks = Checks { backend: NAME };

/// The fast CPU backend.
pub struct CpuBackend {
    pool: ThreadPool,
    /// The f32 kernels of the best instruction set this CPU has; attention runs that one too.
    kernels: RowKernels,
    cache_type: KvCacheType,
    rope_angles: RopeAngles,
    /// Whether matrices are packed for the GEMM once, at load.
    pack_weights: bool,
}

/// A weight as the CPU backend holds it: matrices keep their mapped bytes and get a kernel;
/// vectors (norms, biases) are dequantized once; embedding tables stay as mapped, and rows
/// are dequantized as they are looked up.
pub struct CpuWeight {
    tensor: WeightTensor,
    matrix: Option<Matrix>,
    values: Option<Arc<[f32]>>,
}

impl CpuBackend {
    /// A backend running on `n_threads` threads with its KV cache in `cache_type`.
    pub fn new(n_threads: usize, cache_type: KvCacheType) -> Result<CpuBackend> {
        let pool = ThreadPool::new(n_threads.max(1))
            .map_err(|e| CHECK.error("new", format!("cannot start the thread pool: {e}")))?;
        plumb_ggml::Isa::env_cap().map_err(|e| CHECK.error("new", e))?;
        let kernels = RowKernels::detect();
        tracing::info!(
            threads = pool.n_threads(),
            isa = kernels.isa().name(),
            "cpu backend"
        );
        Ok(CpuBackend {
            pool,
            kernels,
            cache_type,
            rope_angles: RopeAngles::default(),
            pack_weights: false,
        })
    }

    /// Packs every matrix for the GEMM once, as it is loaded, so that products over a few
    /// tokens (batched decoding of many sequences) run through the GEMM without repacking
    /// the weights each time. For servers: it roughly doubles the weights' memory, and one
    /// sequence alone gains nothing from it.
    pub fn with_packed_weights(mut self) -> CpuBackend {
        self.pack_weights = true;
        self
    }

    /// The threads the backend computes on: fewer than asked for where the platform could not
    /// start them.
    pub fn n_threads(&self) -> usize {
        self.pool.n_threads()
    }
}

impl CpuWeight {
    fn values(&self, op: &'static str) -> Result<&[f32]> {
        self.values.as_deref().ok_or_else(|| {
            CHECK.error(
                op,
                format!("{:?} is a matrix, not a vector", self.tensor.name()),
            )
        })
    }

    fn matrix(&self, op: &'static str) -> Result<&Matrix> {
        self.matrix.as_ref().ok_or_else(|| {
            CHECK.error(
                op,
                format!("{:?} is a vector, not a matrix", self.tensor.name()),
            )
        })
    }
}

impl Backend for CpuBackend {
    type Weight = CpuWeight;
    type Tensor = HostTensor;
    type KvStorage = CpuKvStorage;
    /// The host inputs themselves: the pool computes where they are.
    type Pass<'p> = &'p PassInputs<'p>;

    fn name(&self) -> &'static str {
        NAME
    }

    fn load_weight(&self, tensor: WeightTensor, usage: WeightUse) -> Result<CpuWeight> {
        let ty = tensor.ggml_type();
        if usage == WeightUse::Embedding {
            if !plumb_ggml::can_dequantize(ty) {
                return Err(CHECK.error(
                    "load_weight",
                    format!(
                        "tensor {:?} is {ty}, which cannot be dequantized",
                        tensor.name()
                    ),
                ));
            }
            return Ok(CpuWeight {
                tensor,
                matrix: None,
                values: None,
            });
        }
        if tensor.n_rows() <= 1 {
            let values = plumb_ggml::dequantize_row_to_vec(ty, tensor.bytes())
                .map_err(|e| CHECK.error("load_weight", format!("{:?}: {e}", tensor.name())))?;
            return Ok(CpuWeight {
                tensor,
                matrix: None,
                values: Some(values.into()),
            });
        }
        let kernel = DotKernel::new(ty).map_err(|_| {
            CHECK.error(
                "load_weight",
                format!(
                    "tensor {:?} is {ty}, which the cpu backend has no kernel for \
                     (--backend ref runs it)",
                    tensor.name()
                ),
            )
        })?;
        let mut matrix = Matrix {
            tensor: tensor.clone(),
            kernel,
            panels: None,
        };
        if self.pack_weights {
            matrix.pack_panels();
        }
        Ok(CpuWeight {
            matrix: Some(matrix),
            tensor,
            values: None,
        })
    }

    fn new_kv_storage(&self, layout: &KvLayout) -> Result<CpuKvStorage> {
        let block = self.cache_type.ggml_type().block_size();
        if let Some(layer) = layout
            .layers
            .iter()
            .find(|l| !l.head_dim_k.is_multiple_of(block) || !l.head_dim_v.is_multiple_of(block))
        {
            return Err(CHECK.error(
                "new_kv_storage",
                format!(
                    "a {} KV cache needs heads in whole blocks of {block}, but this model's \
                     heads are {} and {} wide",
                    self.cache_type.name(),
                    layer.head_dim_k,
                    layer.head_dim_v
                ),
            ));
        }
        Ok(CpuKvStorage::new(layout, self.cache_type))
    }

    fn copy_kv_blocks(&self, kv: &mut CpuKvStorage, copies: &[BlockCopy]) -> Result<()> {
        CHECK.block_copies(&kv.layer_shapes(), copies)?;
        kv.copy_blocks(copies);
        Ok(())
    }

    fn begin_pass<'p>(&self, inputs: &'p PassInputs<'p>) -> Result<&'p PassInputs<'p>> {
        Ok(inputs)
    }

    fn upload(&self, n_tokens: usize, width: usize, values: Vec<f32>) -> Result<HostTensor> {
        CHECK.host_values(n_tokens, width, &values)?;
        Ok(HostTensor::new(n_tokens, width, values))
    }

    fn to_host(&self, x: &HostTensor) -> Result<Vec<f32>> {
        Ok(x.data().to_vec())
    }

    fn embed(&self, table: &CpuWeight, pass: &&PassInputs<'_>) -> Result<HostTensor> {
        let (table, tokens) = (&table.tensor, pass.tokens);
        CHECK.embed_ids(table.name(), table.n_rows(), tokens)?;
        let mut out = HostTensor::zeros(tokens.len(), table.row_len());
        for (row, &id) in out.rows_mut().zip(tokens) {
            plumb_ggml::dequantize_row(table.ggml_type(), table.row_bytes(id as usize), row)
                .map_err(CHECK.kernel_error("embed"))?;
        }
        Ok(out)
    }

    fn rms_norm(&self, x: &HostTensor, weight: &CpuWeight, eps: f32) -> Result<HostTensor> {
        let weight = weight.values("rms_norm")?;
        CHECK.norm_groups(x, weight.len())?;
        Ok(ops::rms_norm(&self.kernels, &self.pool, x, weight, eps))
    }

    fn matmul(&self, x: &HostTensor, weight: &CpuWeight) -> Result<HostTensor> {
        let matrix = weight.matrix("matmul")?;
        CHECK.width("matmul", x, matrix.tensor.row_len(), matrix.tensor.name())?;
        Ok(matmul::matmul(&self.pool, x, matrix))
    }

    fn add_bias(&self, x: HostTensor, bias: &CpuWeight) -> Result<HostTensor> {
        let values = bias.values("add_bias")?;
        CHECK.width("add_bias", &x, values.len(), bias.tensor.name())?;
        Ok(ops::add_bias(&self.pool, x, values))
    }

    fn scale(&self, x: HostTensor, factor: f32) -> Result<HostTensor> {
        Ok(plumb_backend_ref::ops::scale(x, factor))
    }

    fn rope(
        &self,
        x: HostTensor,
        head_dim: usize,
        rope: &Rope,
        pass: &&PassInputs<'_>,
    ) -> Result<HostTensor> {
        CHECK.rope(&x, head_dim, &pass.positions, rope)?;
        let angles = self.rope_angles.get(rope, &pass.positions);
        Ok(ops::rope(&self.pool, x, head_dim, &angles, rope))
    }

    fn store_kv(
        &self,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut CpuKvStorage,
        layer: usize,
        pass: &&PassInputs<'_>,
    ) -> Result<()> {
        CHECK.store_kv(k, v, &kv.layer_shapes(), layer, pass)?;
        let slots = pass.kv.layer(layer).slots;
        let rotation = kv.rotation;
        // Keys and values are stored rotated when the cache asks for it (see kv_rotation).
        let k_rotated = rotation.keys.map(|g| kv_rotation::rotate(k.clone(), g));
        let v_rotated = rotation.values.map(|g| kv_rotation::rotate(v.clone(), g));
        let (k, v) = (
            k_rotated.as_ref().unwrap_or(k),
            v_rotated.as_ref().unwrap_or(v),
        );
        attention::store_kv(k, v, kv, layer, slots);
        Ok(())
    }

    fn attention(
        &self,
        q: &HostTensor,
        kv: &CpuKvStorage,
        step: &AttentionStep,
        pass: &&PassInputs<'_>,
    ) -> Result<HostTensor> {
        CHECK.attention(q, &kv.layer_shapes(), step, pass)?;
        let layer_pass = LayerPass {
            layer: step.layer,
            tokens: pass.places,
            n_head: step.n_head,
            scale: step.scale,
            softcap: step.softcap,
            kv: pass.kv.layer(step.layer),
        };
        let rotation = kv.rotation;
        // Queries are rotated like the keys, and the output back like the values.
        let q_rotated = rotation.keys.map(|g| kv_rotation::rotate(q.clone(), g));
        let q = q_rotated.as_ref().unwrap_or(q);
        let out = attention::attention(self.kernels.isa(), &self.pool, q, kv, &layer_pass);
        Ok(match rotation.values {
            Some(group) => kv_rotation::rotate(out, group),
            None => out,
        })
    }

    fn gated_activation(
        &self,
        gate: &HostTensor,
        up: &HostTensor,
        act: Activation,
    ) -> Result<HostTensor> {
        CHECK.same_shape("gated_activation", gate, up)?;
        Ok(ops::gated_activation(
            &self.kernels,
            &self.pool,
            gate,
            up,
            act,
        ))
    }

    fn add(&self, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
        CHECK.same_shape("add", a, b)?;
        Ok(ops::add(&self.pool, a, b))
    }

    fn output_rows(&self, x: &HostTensor, pass: &&PassInputs<'_>) -> Result<HostTensor> {
        CHECK.rows(x, pass.output_rows)?;
        Ok(plumb_backend_ref::ops::select_rows(x, pass.output_rows))
    }
}
