// y = x · Wᵀ over one chunk of W's rows, with subgroup operations: each subgroup takes one
// row and up to TOKENS tokens, its invocations stride over the row four values at a time
// (dequantizing each group once for all the tokens), and subgroupAdd sums them. No barrier
// and no workgroup memory: a workgroup holds as many rows as it has subgroups. Everything
// accumulates in f32. The host dispatches enough workgroups for the device's largest
// subgroup; workgroups past the last row do nothing.
// Params and the bindings: `matmul_io.wgsl`.

const TOKENS: u32 = 16u;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) n_subgroups: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) subgroup_size: u32,
) {
    let row = (wid.x + wid.y * nwg.x) * n_subgroups + subgroup;
    let valid = row < p.n_rows;
    let t0 = wid.z * TOKENS;
    let nt = min(TOKENS, p.n_tokens - t0);
    var acc: array<f32, 16>;
    if (valid) {
        let base = row * p.row_bytes;
        for (var g = lane; g < p.k4; g += subgroup_size) {
            let wv = dq4(base, g);
            for (var t = 0u; t < nt; t++) {
                acc[t] += dot(wv, x[(t0 + t) * p.k4 + g]);
            }
        }
    }
    for (var t = 0u; t < TOKENS; t++) {
        let sum = subgroupAdd(acc[t]);
        if (valid && lane == 0u && t < nt) {
            y[(t0 + t) * p.m + p.first_row + row] = sum;
        }
    }
}
