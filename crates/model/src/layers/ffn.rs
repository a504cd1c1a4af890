use crate::backend::{Activation, Backend, GatedFfnWeights};
use crate::hparams::HyperParams;
use crate::layers::{Bias, Linear};
use crate::weights::WeightLoader;
use crate::Result;

/// The gated feed-forward network: `down(act(gate(x)) ⊙ up(x))`.
pub(crate) struct GatedFfn<B: Backend> {
    gate: Linear<B>,
    up: Linear<B>,
    down: Linear<B>,
    activation: Activation,
}

impl<B: Backend> GatedFfn<B> {
    pub fn load(
        loader: &mut WeightLoader<'_, B>,
        il: usize,
        hp: &HyperParams,
        activation: Activation,
        bias: Bias,
    ) -> Result<Self> {
        let blk = format!("blk.{il}");
        Ok(GatedFfn {
            gate: Linear::load(loader, &format!("{blk}.ffn_gate"), hp.n_embd, hp.n_ff, bias)?,
            up: Linear::load(loader, &format!("{blk}.ffn_up"), hp.n_embd, hp.n_ff, bias)?,
            down: Linear::load(loader, &format!("{blk}.ffn_down"), hp.n_ff, hp.n_embd, bias)?,
            activation,
        })
    }

    /// A network whose projections are already loaded (phi3 splits gate and up from one
    /// fused tensor).
    pub fn from_parts(
        gate: Linear<B>,
        up: Linear<B>,
        down: Linear<B>,
        activation: Activation,
    ) -> Self {
        GatedFfn {
            gate,
            up,
            down,
            activation,
        }
    }

    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let weights = GatedFfnWeights {
            gate: self.gate.projection(),
            up: self.up.projection(),
            down: self.down.projection(),
            activation: self.activation,
        };
        backend.gated_ffn(x, &weights)
    }
}
