// RoPE on Q (in place) and K, and K and V into their slots of one layer's cache, in one
// dispatch: as `rope.wgsl` then `store_kv.wgsl`, with the same arithmetic. Each thread takes,
// of one token, one rotated pair of Q, one word (two values) of K and one of V, as far as
// each has that many. K is rotated out of place, into `k_out`: the two values of a word
// belong to different pairs in GPT-NeoX's pairing, whose other halves another thread reads.

struct Params {
    n_tokens: u32,
    // Query heads and the width of a head (Q's and K's).
    n_head: u32,
    head_dim: u32,
    // Rotated pairs per head: n_rot / 2.
    n_pairs: u32,
    // Pairing: 0 adjacent (2i, 2i+1), 1 halves (i, i + n_rot/2) as in GPT-NeoX.
    neox: u32,
    // Words of one token's K and V rows (and of one slot): widths / 2.
    k_words: u32,
    v_words: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read> angles: array<vec2<f32>>;
@group(0) @binding(5) var<storage, read> slots: array<u32>;
@group(0) @binding(6) var<storage, read_write> k_out: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(8) var<storage, read_write> v_cache: array<u32>;

// The pair of dimension d of a head, (a, b), and whether d is its second.
fn pair_of(d: u32) -> vec3<u32> {
    if (p.neox == 1u) {
        if (d < p.n_pairs) {
            return vec3<u32>(d, d + p.n_pairs, 0u);
        }
        return vec3<u32>(d - p.n_pairs, d, 1u);
    }
    return vec3<u32>(d & ~1u, d | 1u, d & 1u);
}

// Value d of the head of K at `base`, rotated for token t.
fn rotated_k(base: u32, d: u32, t: u32) -> f32 {
    if (d >= 2u * p.n_pairs) {
        return k[base + d];
    }
    let ab = pair_of(d);
    let pair = select(ab.x >> 1u, ab.x, p.neox == 1u);
    let cs = angles[t * p.n_pairs + pair];
    let xa = k[base + ab.x];
    let xb = k[base + ab.y];
    if (ab.z == 0u) {
        return xa * cs.x - xb * cs.y;
    }
    return xa * cs.y + xb * cs.x;
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid;
    let q_pairs = p.n_head * p.n_pairs;
    let per_token = max(q_pairs, max(p.k_words, p.v_words));
    if (i >= p.n_tokens * per_token) {
        return;
    }
    let t = i / per_token;
    let j = i % per_token;
    if (j < q_pairs) {
        let pair = j % p.n_pairs;
        let head = j / p.n_pairs;
        var a = 2u * pair;
        var b = 2u * pair + 1u;
        if (p.neox == 1u) {
            a = pair;
            b = pair + p.n_pairs;
        }
        let base = (t * p.n_head + head) * p.head_dim;
        let cs = angles[t * p.n_pairs + pair];
        let xa = q[base + a];
        let xb = q[base + b];
        q[base + a] = xa * cs.x - xb * cs.y;
        q[base + b] = xa * cs.y + xb * cs.x;
    }
    let slot = slots[t];
    if (j < p.k_words) {
        let d = (2u * j) % p.head_dim;
        let base = t * 2u * p.k_words + 2u * j - d;
        let word = vec2<f32>(rotated_k(base, d, t), rotated_k(base, d + 1u, t));
        k_out[t * p.k_words + j] = word;
        k_cache[slot * p.k_words + j] = pack2x16float(word);
    }
    if (j < p.v_words) {
        v_cache[slot * p.v_words + j] = pack2x16float(v[t * p.v_words + j]);
    }
}
