// y = x · Wᵀ for a few tokens (decoding), over one chunk of W's rows, with subgroup
// operations, for the types whose weights are read in units that neighbouring invocations
// take from neighbouring addresses (`Quant::matvec_unit`): a subgroup's loads of a row are
// whole contiguous runs of memory, not one word from each of 32 places as the group per
// invocation of `matvec_subgroup.wgsl` reads them. Each workgroup takes ROWS consecutive
// rows, and each of its THREADS invocations every THREADS-th unit of them: an activation
// value loaded serves ROWS rows, and a row's units are spread over the whole workgroup.
// subgroupAdd sums each subgroup's part of a row, and workgroup memory the subgroups'. One
// token per z. Everything accumulates in f32. Rows past the last are computed as the last
// one and not written.
// Params and the bindings: `matvec_io.wgsl`; `dot_unit` and `w`: the type's unit file.

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
    let first = (wid.x + wid.y * nwg.x) * ROWS;
    let t = wid.z;
    var rows: array<u32, ROWS>;
    for (var r = 0u; r < ROWS; r++) {
        rows[r] = min(first + r, p.n_rows - 1u) * p.row_bytes;
    }
    var acc: array<f32, ROWS>;
    if (first < p.n_rows) {
        for (var u = lid; u < p.n_groups; u += THREADS) {
            dot_unit(rows, u, t * p.k4, &acc);
        }
    }
    for (var r = 0u; r < ROWS; r++) {
        let sum = subgroupAdd(acc[r]);
        if (lane == 0u) {
            partial[subgroup][r] = sum;
        }
    }
    workgroupBarrier();
    if (lid < ROWS && first + lid < p.n_rows) {
        var sum = 0.0;
        for (var s = 0u; s < n_subgroups; s++) {
            sum += partial[s][lid];
        }
        let i = t * p.m + p.first_row + first + lid;
        y[i] = finish(i, sum);
    }
}
