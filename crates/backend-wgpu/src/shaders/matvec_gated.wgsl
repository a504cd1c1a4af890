// The mat-vec kernels' output for the gated FFN's up projection: act(gate) ⊙ v, with the gate
// projection's outputs at binding 4 and ACT defined by the host (`activations.wgsl`): the
// activation costs no dispatch of its own, and gives what `gated_activation.wgsl` would.

@group(0) @binding(4) var<storage, read> gate: array<f32>;

fn finish(i: u32, v: f32) -> f32 {
    return activate(ACT, gate[i]) * v;
}
