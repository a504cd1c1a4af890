// The k largest values of each row, largest first, ties to the lower index, in the order of
// plumb_model::top_k: one workgroup per row picks them one at a time, each
// the best of the values ordered after the one picked before.

struct Params {
    // Rows of this window.
    n_rows: u32,
    width: u32,
    k: u32,
    // The window's first row: where its choices go in `out`.
    first_row: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
// Per row, k (index, value bits) pairs.
@group(0) @binding(2) var<storage, read_write> out: array<vec2<u32>>;

const THREADS: u32 = 256u;
const NONE: u32 = 0xffffffffu;

var<workgroup> best_key: array<u32, 256>;
var<workgroup> best_index: array<u32, 256>;

// The sort key, as an unsigned integer in the order of Rust's f32::total_cmp (−0 below +0),
// with NaN (found by its bits, which no fast-math assumption removes) as −inf.
fn key(v: f32) -> u32 {
    var bits = bitcast<u32>(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        bits = 0xff800000u;
    }
    if ((bits & 0x80000000u) != 0u) {
        return ~bits;
    }
    return bits | 0x80000000u;
}

// Whether (ka, ia) comes before (kb, ib): a larger key, or the same key and a lower index.
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    let valid = row < p.n_rows;
    let base = min(row, p.n_rows - 1u) * p.width;
    var prev_key = 0u;
    var prev_index = NONE;
    for (var j = 0u; j < p.k; j++) {
        var best = 0u;
        var index = NONE;
        for (var i = lid; i < p.width; i += THREADS) {
            let candidate = key(x[base + i]);
            let after_prev = prev_index == NONE || before(prev_key, prev_index, candidate, i);
            if (after_prev && (index == NONE || before(candidate, i, best, index))) {
                best = candidate;
                index = i;
            }
        }
        best_key[lid] = best;
        best_index[lid] = index;
        workgroupBarrier();
        for (var s = THREADS / 2u; s > 0u; s >>= 1u) {
            if (lid < s) {
                let ov = best_key[lid + s];
                let oi = best_index[lid + s];
                if (oi != NONE && (best_index[lid] == NONE || before(ov, oi, best_key[lid], best_index[lid]))) {
                    best_key[lid] = ov;
                    best_index[lid] = oi;
                }
            }
            workgroupBarrier();
        }
        prev_key = best_key[0];
        prev_index = best_index[0];
        if (valid && lid == 0u) {
            out[(p.first_row + row) * p.k + j] = vec2<u32>(prev_index, bitcast<u32>(x[base + prev_index]));
        }
        workgroupBarrier();
    }
}
