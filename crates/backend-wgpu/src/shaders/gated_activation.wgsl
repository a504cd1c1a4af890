// out = act(gate) ⊙ up, with act SiLU (0) or GELU with the tanh approximation (1): `activate`
// (`activations.wgsl`).

struct Params {
    n: u32,
    act: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (i < p.n) {
        out[i] = activate(p.act, gate[i]) * up[i];
    }
}
