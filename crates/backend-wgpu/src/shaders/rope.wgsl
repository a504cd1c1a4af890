// RoPE in place: each thread rotates one pair of one head of one token by the angle the host
// computed (in f64) for the token's position and the pair: (cos θ, sin θ).

struct Params {
    n_tokens: u32,
    width: u32,
    head_dim: u32,
    // Rotated pairs per head: n_rot / 2.
    n_pairs: u32,
    // Pairing: 0 adjacent (2i, 2i+1), 1 halves (i, i + n_rot/2) as in GPT-NeoX.
    neox: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read> angles: array<vec2<f32>>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    let n_heads = p.width / p.head_dim;
    if (i >= p.n_tokens * n_heads * p.n_pairs) {
        return;
    }
    let pair = i % p.n_pairs;
    let head = (i / p.n_pairs) % n_heads;
    let t = i / (p.n_pairs * n_heads);
    var a = 2u * pair;
    var b = 2u * pair + 1u;
    if (p.neox == 1u) {
        a = pair;
        b = pair + p.n_pairs;
    }
    let base = t * p.width + head * p.head_dim;
    let cs = angles[t * p.n_pairs + pair];
    let xa = x[base + a];
    let xb = x[base + b];
    x[base + a] = xa * cs.x - xb * cs.y;
    x[base + b] = xa * cs.y + xb * cs.x;
}
