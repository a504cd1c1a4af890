// y = x · Wᵀ over one chunk of W's rows (a weight larger than a binding is split by rows).
// A workgroup takes one row and up to TOKENS tokens: its threads stride over the row four
// values at a time, dequantizing each group once for all the tokens, and their partial sums
// meet in workgroup memory. Everything accumulates in f32.
// Params and the bindings: `matmul_io.wgsl`.

const THREADS: u32 = 64u;
const TOKENS: u32 = 16u;

var<workgroup> partial: array<f32, 1024>; // TOKENS × THREADS

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let row = wid.x + wid.y * nwg.x;
    let valid = row < p.n_rows;
    let t0 = wid.z * TOKENS;
    let nt = min(TOKENS, p.n_tokens - t0);
    var acc: array<f32, 16>;
    if (valid) {
        let base = row * p.row_bytes;
        for (var g = lid; g < p.k4; g += THREADS) {
            let wv = dq4(base, g);
            for (var t = 0u; t < nt; t++) {
                acc[t] += dot(wv, x[(t0 + t) * p.k4 + g]);
            }
        }
    }
    for (var t = 0u; t < TOKENS; t++) {
        partial[t * THREADS + lid] = acc[t];
    }
    workgroupBarrier();
    for (var s = THREADS / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var t = 0u; t < TOKENS; t++) {
                partial[t * THREADS + lid] += partial[t * THREADS + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (valid && lid < nt) {
        y[(t0 + lid) * p.m + p.first_row + row] = partial[lid * THREADS];
    }
}
