//! The CPU f32 reference backend: the yardstick every faster backend is compared with.
//!
//! Weights stay in the mapped file in their stored type and are dequantized a few rows at a
//! time, exactly as ggml dequantizes them. Everything else is computed in f32 (reductions in
//! f64) in the plainest form: clarity beats speed here. The matrix products and attention
//! run on all cores through rayon.

mod attention;
mod matmul;
mod ops;
mod tensor;

use plumb_ggml::KernelError;
use plumb_model::{
    Activation, Activations, AttentionStep, Backend, KvLayout, ModelError, Result, Rope,
    WeightTensor,
};

pub use attention::RefKvStorage;
pub use tensor::HostTensor;

const NAME: &str = "ref";

/// The reference backend.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefBackend;

impl RefBackend {
    pub fn new() -> Self {
        RefBackend
    }
}

fn error(op: &'static str, message: impl Into<String>) -> ModelError {
    ModelError::Backend {
        backend: NAME,
        op,
        message: message.into(),
    }
}

fn kernel_error(op: &'static str) -> impl Fn(KernelError) -> ModelError {
    move |e| error(op, e.to_string())
}

/// Fails unless `x` is `expected` wide.
fn check_width(op: &'static str, x: &HostTensor, expected: usize, what: &str) -> Result<()> {
    if x.width() != expected {
        return Err(error(
            op,
            format!("input is {} wide, {what} needs {expected}", x.width()),
        ));
    }
    Ok(())
}

fn check_same_shape(op: &'static str, a: &HostTensor, b: &HostTensor) -> Result<()> {
    if (a.n_tokens(), a.width()) != (b.n_tokens(), b.width()) {
        return Err(error(
            op,
            format!(
                "shapes differ: [{} × {}] and [{} × {}]",
                a.n_tokens(),
                a.width(),
                b.n_tokens(),
                b.width()
            ),
        ));
    }
    Ok(())
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
            return Err(error(
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

    fn embed(&self, table: &WeightTensor, tokens: &[u32]) -> Result<HostTensor> {
        if let Some(&bad) = tokens.iter().find(|&&t| t as usize >= table.n_rows()) {
            return Err(error(
                "embed",
                format!("token {bad} is not a row of {:?}", table.name()),
            ));
        }
        matmul::lookup_rows(table, tokens).map_err(kernel_error("embed"))
    }

    fn rms_norm(&self, x: &HostTensor, weight: &WeightTensor, eps: f32) -> Result<HostTensor> {
        let weight = matmul::to_f32(weight).map_err(kernel_error("rms_norm"))?;
        if weight.is_empty() || !x.width().is_multiple_of(weight.len()) {
            return Err(error(
                "rms_norm",
                format!(
                    "rows of {} do not split into groups of {}",
                    x.width(),
                    weight.len()
                ),
            ));
        }
        Ok(ops::rms_norm(x, &weight, eps))
    }

    fn matmul(&self, x: &HostTensor, weight: &WeightTensor) -> Result<HostTensor> {
        check_width("matmul", x, weight.row_len(), weight.name())?;
        matmul::matmul(x, weight).map_err(kernel_error("matmul"))
    }

    fn add_bias(&self, x: HostTensor, bias: &WeightTensor) -> Result<HostTensor> {
        check_width("add_bias", &x, bias.n_elements(), bias.name())?;
        let bias = matmul::to_f32(bias).map_err(kernel_error("add_bias"))?;
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
        if head_dim == 0 || !x.width().is_multiple_of(head_dim) || rope.n_rot > head_dim {
            return Err(error(
                "rope",
                format!(
                    "rows of {} are not whole heads of {head_dim} with {} rotated dimensions",
                    x.width(),
                    rope.n_rot
                ),
            ));
        }
        if positions.len() != x.n_tokens() {
            return Err(error(
                "rope",
                format!("{} positions for {} tokens", positions.len(), x.n_tokens()),
            ));
        }
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
        if step.layer >= kv.n_layers() {
            return Err(error(
                "attention",
                format!("layer {} of a {}-layer cache", step.layer, kv.n_layers()),
            ));
        }
        let shape = *kv.layer_shape(step.layer);
        if step.n_head == 0 || !step.n_head.is_multiple_of(shape.n_head_kv) {
            return Err(error(
                "attention",
                format!(
                    "{} query heads cannot share {} KV heads",
                    step.n_head, shape.n_head_kv
                ),
            ));
        }
        check_width("attention", q, step.n_head * shape.head_dim_k, "Q")?;
        check_width("attention", k, shape.k_width(), "K")?;
        check_width("attention", v, shape.v_width(), "V")?;
        let n = q.n_tokens();
        if k.n_tokens() != n || v.n_tokens() != n || step.tokens.len() != n {
            return Err(error(
                "attention",
                format!(
                    "Q, K, V and the batch have {n}, {}, {} and {} tokens",
                    k.n_tokens(),
                    v.n_tokens(),
                    step.tokens.len()
                ),
            ));
        }
        Ok(attention::attention(q, k, v, kv, step))
    }

    fn gated_activation(
        &self,
        gate: &HostTensor,
        up: &HostTensor,
        act: Activation,
    ) -> Result<HostTensor> {
        check_same_shape("gated_activation", gate, up)?;
        Ok(ops::gated_activation(gate, up, act))
    }

    fn add(&self, a: &HostTensor, b: &HostTensor) -> Result<HostTensor> {
        check_same_shape("add", a, b)?;
        Ok(ops::add(a, b))
    }

    fn select_rows(&self, x: &HostTensor, rows: &[usize]) -> Result<HostTensor> {
        if let Some(&bad) = rows.iter().find(|&&r| r >= x.n_tokens()) {
            return Err(error(
                "select_rows",
                format!("row {bad} of {}", x.n_tokens()),
            ));
        }
        Ok(ops::select_rows(x, rows))
    }

    fn to_host(&self, x: &HostTensor) -> Result<Vec<f32>> {
        Ok(x.data().to_vec())
    }
}
