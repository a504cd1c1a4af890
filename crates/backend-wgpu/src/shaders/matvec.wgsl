// y = x · Wᵀ for a few tokens (decoding), over one chunk of W's rows, without subgroup
// operations: a workgroup takes ROWS consecutive rows, its threads stride over the rows'
// value groups (`matvec_dot.wgsl`: scales decoded once per group, each activation vec4
// loaded once for all ROWS rows), and their partial sums meet in workgroup memory. One
// token per z. Everything accumulates in f32. Rows past the last are computed as the last
// one and not written.
// Params and the bindings: `matvec_io.wgsl`.

const THREADS: u32 = 64u;

var<workgroup> partial: array<array<f32, THREADS>, ROWS>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let first = (wid.x + wid.y * nwg.x) * ROWS;
    let t = wid.z;
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(first + r, p.n_rows - 1u) * p.row_bytes;
    }
    var acc: array<f32, ROWS>;
    if (first < p.n_rows) {
        for (var g = lid; g < p.n_groups; g += THREADS) {
            dot_group(rows, g, t * p.k4, &acc);
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        partial[r][lid] = acc[r];
    }
    workgroupBarrier();
    for (var s = THREADS / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var r = 0u; r < ROWS; r++) {
                partial[r][lid] += partial[r][lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < ROWS && first + lid < p.n_rows) {
        let i = t * p.m + p.first_row + first + lid;
        y[i] = finish(i, partial[lid][0]);
    }
}
