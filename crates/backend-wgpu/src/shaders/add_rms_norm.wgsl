// The residual sum and its RMSNorm in one pass over the values: sum = a + b is written, and
// each group of `group` consecutive values of it (a row) is divided by its root mean square
// and multiplied by the weight, as `add.wgsl` then `rms_norm.wgsl` would (the same sums in the
// same order). One workgroup per group.

struct Params {
    n_groups: u32,
    group: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> weight: array<f32>;
@group(0) @binding(4) var<storage, read_write> sum: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

const THREADS: u32 = 64u;

var<workgroup> sums: array<f32, 64>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let index = wid.x + wid.y * nwg.x;
    let valid = index < p.n_groups;
    let base = index * p.group;
    var squares = 0.0;
    if (valid) {
        for (var i = lid; i < p.group; i += THREADS) {
            let v = a[base + i] + b[base + i];
            sum[base + i] = v;
            squares += v * v;
        }
    }
    sums[lid] = squares;
    workgroupBarrier();
    for (var s = THREADS / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            sums[lid] += sums[lid + s];
        }
        workgroupBarrier();
    }
    if (valid) {
        let scale = 1.0 / sqrt(sums[0] / f32(p.group) + p.eps);
        // Each invocation reads back the values it wrote.
        for (var i = lid; i < p.group; i += THREADS) {
            out[base + i] = (sum[base + i] * scale) * weight[i];
        }
    }
}
