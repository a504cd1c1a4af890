// The gated FFN's hidden values act(x · Gᵀ) ⊙ (x · Uᵀ) for a few tokens (decoding), the gate
// G and up U projections in one dispatch: `matvec_units.wgsl`, but that each workgroup takes
// the same ROWS rows of both weights (`w0` the gate's chunk, `w1` the up projection's, of the
// same rows), a unit's activations serve all 2·ROWS of them, and it writes act(gate) ⊙ up to
// `y0` (ACT and `activate`: `activations.wgsl`). Params (one product, its rows those of each
// chunk), the bindings: `matvec_units_io.wgsl`; the units: the type's unit file.

const THREADS: u32 = 128u;

// The subgroups' sums of each gate row, then of each up row.
var<workgroup> partial: array<array<f32, 2 * ROWS>, THREADS / 4u>;

@compute @workgroup_size(THREADS)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) n_subgroups: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let product = p.products[0];
    let first = (wid.x + wid.y * nwg.x) * ROWS;
    let t = wid.z;
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(first + r, product.n_rows - 1u) * product.row_vec4s;
    }
    var gate: array<f32, ROWS>;
    var up: array<f32, ROWS>;
    if (first < product.n_rows) {
        for (var u = lid; u < p.n_units; u += THREADS) {
            let ux = unit_x(u, t * p.k4);
            for (var r = 0u; r < ROWS; r++) {
                let header = unit_header_at(rows[r], u);
                let nibbles = unit_nibbles_at(rows[r], u);
                gate[r] += unit_dot(w0[header], w0[nibbles], u, ux);
                up[r] += unit_dot(w1[header], w1[nibbles], u, ux);
            }
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let g = subgroupAdd(gate[r]);
        let v = subgroupAdd(up[r]);
        if (lane == 0u) {
            partial[subgroup][r] = g;
            partial[subgroup][ROWS + r] = v;
        }
    }
    workgroupBarrier();
    if (lid < ROWS && first + lid < product.n_rows) {
        var g = 0.0;
        var v = 0.0;
        for (var i = 0u; i < n_subgroups; i++) {
            g += partial[i][lid];
            v += partial[i][ROWS + lid];
        }
        y0[t * product.m + product.first_row + first + lid] = activate(ACT, g) * v;
    }
}
