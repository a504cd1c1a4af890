// y = x · Wᵀ for a few tokens (decoding), over one chunk of W's rows, with subgroup
// operations: each subgroup takes ROWS consecutive rows, its invocations stride over the
// rows' value groups (`matvec_dot.wgsl`: scales decoded once per group, each activation
// vec4 loaded once for all ROWS rows), and subgroupAdd sums each row. One token per z; no
// barrier and no workgroup memory. Everything accumulates in f32. The host dispatches enough
// workgroups for the device's largest subgroup; rows past the last are computed as the last
// one and not written.
// Params and the bindings: `matvec_io.wgsl`.

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) n_subgroups: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) subgroup_size: u32,
) {
    let first = ((wid.x + wid.y * nwg.x) * n_subgroups + subgroup) * ROWS;
    let t = wid.z;
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(first + r, p.n_rows - 1u) * p.row_bytes;
    }
    var acc: array<f32, ROWS>;
    if (first < p.n_rows) {
        for (var g = lane; g < p.n_groups; g += subgroup_size) {
            dot_group(rows, g, t * p.k4, &acc);
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let sum = subgroupAdd(acc[r]);
        if (lane == 0u && first + r < p.n_rows) {
            let i = t * p.m + p.first_row + first + r;
            y[i] = finish(i, sum);
        }
    }
}
