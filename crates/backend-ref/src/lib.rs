//! The CPU f32 reference backend: the yardstick every faster backend is compared with.
//!
//! Weights stay in the mapped file in their stored type and are dequantized a few rows at a
//! time, exactly as ggml dequantizes them. Everything else is computed in f32 (reductions in
//! f64) in the plainest form: clarity beats speed here. The matrix products and attention
//! run on all cores through rayon.

mod attention;
mod checks;
mod matmul;
pub mod ops;
mod tensor;

use plumb_model::{
    Activation, AttentionStep, Backend, BlockCopy, KvLayout, Result, Rope, WeightTensor,
};

pub use attention::RefKvStorage;
pub use checks::Checks;
pub use matmul::dot;
pub use tensor::HostTensor;

const NAME: &str = "ref";
const CHECK: Checks = Checks { backend: NAME };

/// The reference backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefBackend;

impl RefBackend {
    pub fn new() -> Self {
        RefBackend
    }
}

impl Backend for RefBackend {
    type Weight = WeightTensor;
    type Tensor = HostTensor;
    type KvStorage = RefKvStorage;

    fn name(&self) -> &'static str {
        NAME
    }

    fn load_weight(&self, tensor: WeightTensor) -> Result<WeightTensor> {
        if !plumb_ggml::can_dequantize(tensor.ggml_type()) {
            return Err(CHECK.error(
                "load_weight",
                format!(
                    "tensor {:?} is {}, which cannot be dequantized",
                    tensor.name(),
                    tensor.ggml_type()
                ),
            ));
        }
        Ok(tensor)
    }

    fn new_kv_storage(&self, layout: &KvLayout) -> Result<RefKvStorage> {
        Ok(RefKvStorage::new(layout))
    }

    fn copy_kv_blocks(&self, kv: &mut RefKvStorage, copies: &[BlockCopy]) -> Result<()> {
        let layers: Vec<_> = (0..kv.n_layers()).map(|l| kv.layer_shape(l)).collect();
        CHECK.block_copies(&layers, copies)?;
        kv.copy_blocks(copies);
        Ok(())
    }

    fn embed(&self, table: &WeightTensor, tokens: &[u32]) -> Result<HostTensor> {
        CHECK.embed_ids(table.name(), table.n_rows(), tokens)?;
        matmul::lookup_rows(table, tokens).map_err(CHECK.kernel_error("embed"))
    }

    fn rms_norm(&self, x: &HostTensor, weight: &WeightTensor, eps: f32) -> Result<HostTensor> {
        let weight = matmul::to_f32(weight).map_err(CHECK.kernel_error("rms_norm"))?;
        CHECK.norm_groups(x, weight.len())?;
        Ok(ops::rms_norm(x, &weight, eps))
    }

    fn matmul(&self, x: &HostTensor, weight: &WeightTensor) -> Result<HostTensor> {
        CHECK.width("matmul", x, weight.row_len(), weight.name())?;
        matmul::matmul(x, weight).map_err(CHECK.kernel_error("matmul"))
    }

    fn add_bias(&self, x: HostTensor, bias: &WeightTensor) -> Result<HostTensor> {
        CHECK.width("add_bias", &x, bias.n_elements(), bias.name())?;
        let bias = matmul::to_f32(bias).map_err(CHECK.kernel_error("add_bias"))?;
        Ok(ops::add_bias(x, &bias))
    }

    fn scale(&self, x: HostTensor, factor: f32) -> Result<HostTensor> {
        Ok(ops::scale(x, factor))
    }

    fn rope(
        &self,
        x: HostTensor,
        head_dim: usize,
        positions: &[usize],
        rope: &Rope,
    ) -> Result<HostTensor> {
        CHECK.rope(&x, head_dim, positions, rope)?;
        Ok(ops::rope(x, head_dim, positions, rope))
    }

    fn attention(
        &self,
        q: &HostTensor,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut RefKvStorage,
        step: &AttentionStep<'_>,
    ) -> Result<HostTensor> {
        let layers: Vec<_> = (0..kv.n_layers()).map(|l| kv.layer_shape(l)).collect();
        CHECK.attention(q, k, v, &layers, step)?;
        Ok(attention::attention(q, k, v, kv, step))
    }

    fn gated_activation(
        &self,
        gate: &HostTensor,
        up: &HostTensor,
        act: Activation,
    ) -> Result<HostTensor> {
        CHECK.same_shape("gated_activation", gate, up)?;
        Ok(ops::gated_activation(gate, up, act))
    }

    fn add(&self, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
        CHECK.same_shape("add", a, b)?;
        Ok(ops::add(a, b))
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> Result<HostTensor> {
        CHECK.rows(x, rows)?;
        Ok(ops::select_rows(x, rows))
    }

    fn to_host(&self, x: &HostTensor) -> Result<Vec<f32>> {
        Ok(x.data().to_vec())
    }
}
