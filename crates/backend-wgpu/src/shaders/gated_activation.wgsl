// out = act(gate) ⊙ up, with act SiLU (0) or GELU with the tanh approximation (1).

struct Params {
    n: u32,
    act: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> gate: array<f32>;
@group(0) @binding(2) var<storage, read> up: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

fn silu(x: f32) -> f32 {
    return x / (1.0 + exp(-x));
}

// tanh(u) as 1 − 2/(e^2u + 1), which saturates to ±1 where e^2u overflows instead of
// giving inf/inf.
fn gelu_tanh(x: f32) -> f32 {
    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    let t = 1.0 - 2.0 / (exp(2.0 * u) + 1.0);
    return 0.5 * x * (1.0 + t);
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    if (i < p.n) {
        let g = gate[i];
        var a: f32;
        if (p.act == 0u) {
            a = silu(g);
        } else {
            a = gelu_tanh(g);
        }
        out[i] = a * up[i];
    }
}
