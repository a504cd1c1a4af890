use crate::backend::{Backend, Projection};
use crate::weights::WeightLoader;
use crate::Result;

/// Whether an architecture's projection has a bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bias {
    /// Never: a `.bias` tensor in the file is left unused, and so reported.
    No,
    /// Some files of the architecture have one.
    Optional,
    /// Always, e.g. qwen2's Q/K/V.
    Required,
}

/// `y = x · Wᵀ (+ b)`, with the weight `{prefix}.weight` of GGUF shape `[n_in, n_out]`.
pub(crate) struct Linear<B: Backend> {
    weight: B::Weight,
    bias: Option<B::Weight>,
}

impl<B: Backend> Linear<B> {
    pub fn load(
        loader: &mut WeightLoader<'_, B>,
        prefix: &str,
        n_in: usize,
        n_out: usize,
        bias: Bias,
    ) -> Result<Self> {
        let weight = loader.tensor(&format!("{prefix}.weight"), &[n_in, n_out])?;
        let bias_name = format!("{prefix}.bias");
        let bias = match bias {
            Bias::No => None,
            Bias::Optional => loader.optional(&bias_name, &[n_out])?,
            Bias::Required => Some(loader.tensor(&bias_name, &[n_out])?),
        };
        Ok(Linear { weight, bias })
    }

    /// A projection whose weight is already loaded, e.g. the output head tied to the
    /// embedding table.
    pub fn from_weight(weight: B::Weight) -> Self {
        Linear { weight, bias: None }
    }

    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        backend.project(x, self.projection())
    }

    /// The weight and bias, as the backend's composite ops take them.
    pub fn projection(&self) -> Projection<'_, B::Weight> {
        Projection {
            weight: &self.weight,
            bias: self.bias.as_ref(),
        }
    }
}
