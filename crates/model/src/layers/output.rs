use crate::backend::Backend;
use crate::hparams::HyperParams;
use crate::layers::{Bias, Linear};
use crate::pass::Pass;
use crate::weights::WeightLoader;
use crate::Result;

/// The final RMSNorm and the projection to vocabulary logits (`output.weight`, or the token
/// embedding table when the model ties them), soft-capped where the model says so (gemma2).
pub(crate) struct OutputHead<B: Backend> {
    norm: B::Weight,
    output: Linear<B>,
    softcap: Option<f32>,
    rms_eps: f32,
}

impl<B: Backend> OutputHead<B> {
    pub fn load(loader: &mut WeightLoader<'_, B>, hp: &HyperParams) -> Result<Self> {
        let norm = loader.tensor("output_norm.weight", &[hp.n_embd])?;
        let output = if loader.has("output.weight") {
            Linear::load(loader, "output", hp.n_embd, hp.n_vocab, Bias::No)?
        } else {
            Linear::from_weight(loader.tensor("token_embd.weight", &[hp.n_embd, hp.n_vocab])?)
        };
        Ok(OutputHead {
            norm,
            output,
            softcap: hp.final_softcap,
            rms_eps: hp.rms_eps,
        })
    }

    /// Logits for the batch rows that want them, from the last layer's output.
    pub fn forward(&self, pass: &mut Pass<'_, '_, B>, x: &B::Tensor) -> Result<B::Tensor> {
        let b = pass.backend;
        let x = b.output_rows(x, pass.state)?;
        let x = b.rms_norm(&x, &self.norm, self.rms_eps)?;
        pass.observe(&x, "result_norm", None)?;
        let mut logits = self.output.forward(b, &x)?;
        if let Some(cap) = self.softcap {
            logits = b.softcap(logits, cap)?;
        }
        pass.observe(&logits, "result_output", None)?;
        Ok(logits)
    }
}
