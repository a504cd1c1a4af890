use crate::backend::{Activation, Backend, GatedFfnWeights, MoeFfnWeights, Projection};
use crate::hparams::HyperParams;
use crate::weights::WeightLoader;
use crate::Result;

/// The mixture-of-experts FFN (Mixtral, Qwen3-MoE): a router (`ffn_gate_inp`) sends each row
/// to `n_used` of the layer's gated SiLU experts (`ffn_{gate,up,down}_exps`, one matrix per
/// expert stacked along the last dimension), whose outputs are summed by routing weight.
pub(crate) struct MoeFfn<B: Backend> {
    router: B::Weight,
    gate: Vec<B::Weight>,
    up: Vec<B::Weight>,
    down: Vec<B::Weight>,
    n_used: usize,
}

impl<B: Backend> MoeFfn<B> {
    pub fn load(loader: &mut WeightLoader<'_, B>, il: usize, hp: &HyperParams) -> Result<Self> {
        let blk = format!("blk.{il}");
        let (n_embd, n_ff, n_expert) = (hp.n_embd, hp.n_ff_exp, hp.n_expert);
        Ok(MoeFfn {
            router: loader.tensor(&format!("{blk}.ffn_gate_inp.weight"), &[n_embd, n_expert])?,
            gate: loader.experts(
                &format!("{blk}.ffn_gate_exps.weight"),
                n_embd,
                n_ff,
                n_expert,
            )?,
            up: loader.experts(&format!("{blk}.ffn_up_exps.weight"), n_embd, n_ff, n_expert)?,
            down: loader.experts(
                &format!("{blk}.ffn_down_exps.weight"),
                n_ff,
                n_embd,
                n_expert,
            )?,
            n_used: hp.n_expert_used,
        })
    }

    pub fn forward(&self, backend: &B, x: &B::Tensor) -> Result<B::Tensor> {
        let projection = |weight| Projection { weight, bias: None };
        let experts = (self.gate.iter().zip(&self.up).zip(&self.down))
            .map(|((gate, up), down)| GatedFfnWeights {
                gate: projection(gate),
                up: projection(up),
                down: projection(down),
                activation: Activation::Silu,
            })
            .collect();
        let weights = MoeFfnWeights {
            router: &self.router,
            experts,
            n_used: self.n_used,
        };
        backend.moe_ffn(x, &weights)
    }
}
