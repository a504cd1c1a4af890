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
    Activation, AttentionStep, Backend, BlockCopy, KvLayout, PassInputs, Result, Rope,
    WeightTensor, WeightUse,
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
    /// The host inputs themselves: the reference computes where they are.
    type Pass<'p> = &'p PassInputs<'p>;

    fn name(&self) -> &'static str {
        NAME
    }

    fn load_weight(&self, tensor: WeightTensor, _usage: WeightUse) -> Result<WeightTensor> {
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

    fn embed(&self, table: &WeightTensor, pass: &&PassInputs<'_>) -> Result<HostTensor> {
        CHECK.embed_ids(table.name(), table.n_rows(), pass.tokens)?;
        matmul::lookup_rows(table, pass.tokens).map_err(CHECK.kernel_error("embed"))
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
        rope: &Rope,
        pass: &&PassInputs<'_>,
    ) -> Result<HostTensor> {
        CHECK.rope(&x, head_dim, &pass.positions, rope)?;
        Ok(ops::rope(x, head_dim, &pass.positions, rope))
    }

    fn store_kv(
        &self,
        k: &HostTensor,
        v: &HostTensor,
        kv: &mut RefKvStorage,
        layer: usize,
        pass: &&PassInputs<'_>,
    ) -> Result<()> {
        CHECK.store_kv(k, v, &kv.layer_shapes(), layer, pass)?;
        attention::store_kv(k, v, kv, layer, pass);
        Ok(())
    }

    fn attention(
        &self,
        q: &HostTensor,
        kv: &RefKvStorage,
        step: &AttentionStep,
        pass: &&PassInputs<'_>,
    ) -> Result<HostTensor> {
        CHECK.attention(q, &kv.layer_shapes(), step, pass)?;
        Ok(attention::attention(q, kv, step, pass))
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

    fn output_rows(&self, x: &HostTensor, pass: &&PassInputs<'_>) -> Result<HostTensor> {
        CHECK.rows(x, pass.output_rows)?;
        Ok(ops::select_rows(x, pass.output_rows))
    }
}
