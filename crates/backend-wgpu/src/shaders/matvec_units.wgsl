// y = x · Wᵀ for a few tokens (decoding), for up to PRODUCTS weights that take the same x at
// once (Q, K and V; the chunks of one weight), with subgroup operations, for the types whose
// weights are read in units that neighbouring invocations take from neighbouring addresses
// (`Quant::matvec_unit`): a subgroup's loads of a row are whole contiguous runs of memory.
// Each workgroup takes ROWS consecutive rows of one product, and each of its THREADS
// invocations every THREADS-th unit of them: the activations of a unit are loaded and
// quantized once for ROWS rows, and a row's units are spread over the whole workgroup.
// subgroupAdd sums each subgroup's part of a row, and workgroup memory the subgroups'. One
// token per z. Integer products, summed in f32 once scaled. Rows past the last are computed
// as the last one and not written.
// Params, the bindings, `weight` and `store`: `matvec_units_io.wgsl`; `unit_x`, `unit_dot` and
// where a unit is: the type's unit file.

const THREADS: u32 = 128u;

// The subgroups' sums of each row: subgroups have at least 4 invocations.
var<workgroup> partial: array<array<f32, ROWS>, THREADS / 4u>;

@compute @workgroup_size(THREADS)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) n_subgroups: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let wg = wid.x + wid.y * nwg.x;
    var s = 0u;
    for (var i = 1u; i < PRODUCTS; i++) {
        if (wg >= p.products[i].first_workgroup) {
            s = i;
        }
    }
    let product = p.products[s];
    let first = (wg - product.first_workgroup) * ROWS;
    let t = wid.z;
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(first + r, product.n_rows - 1u) * product.row_vec4s;
    }
    var acc: array<f32, ROWS>;
    if (first < product.n_rows) {
        for (var u = lid; u < p.n_units; u += THREADS) {
            let ux = unit_x(u, t * p.k4);
            for (var r = 0u; r < ROWS; r++) {
                let header = weight(s, unit_header_at(rows[r], u));
                let nibbles = weight(s, unit_nibbles_at(rows[r], u));
                acc[r] += unit_dot(header, nibbles, u, ux);
            }
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let sum = subgroupAdd(acc[r]);
        if (lane == 0u) {
            partial[subgroup][r] = sum;
        }
    }
    workgroupBarrier();
    if (lid < ROWS && first + lid < product.n_rows) {
        var sum = 0.0;
        for (var i = 0u; i < n_subgroups; i++) {
            sum += partial[i][lid];
        }
        store(s, t * product.m + product.first_row + first + lid, sum);
    }
}
