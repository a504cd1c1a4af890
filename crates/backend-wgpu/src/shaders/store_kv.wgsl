// Stores each token's K and V rows in its slot of one layer's cache, rounded to f16 and
// packed two to a word (pack2x16float: no shader-f16 needed).

struct Params {
    n_tokens: u32,
    // Words of one slot: K and V row widths / 2.
    k_words: u32,
    v_words: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> k: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read> slots: array<u32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<u32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    let per_token = max(p.k_words, p.v_words);
    if (i >= p.n_tokens * per_token) {
        return;
    }
    let t = i / per_token;
    let j = i % per_token;
    let slot = slots[t];
    if (j < p.k_words) {
        k_cache[slot * p.k_words + j] = pack2x16float(k[t * p.k_words + j]);
    }
    if (j < p.v_words) {
        v_cache[slot * p.v_words + j] = pack2x16float(v[t * p.v_words + j]);
    }
}
