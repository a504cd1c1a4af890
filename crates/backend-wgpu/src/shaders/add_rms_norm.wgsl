// The residual sum and its RMSNorm in one pass over the values: sum = a + b is written, and
// each group of `group` consecutive values of it (a row) is divided by its root mean square
// and multiplied by the weight, as `add.wgsl` then `rms_norm.wgsl` would. One workgroup of
// 256 per group, four values at a time where the group is whole vec4s (`rms_norm.wgsl` says
// why).

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

fn sum4(i: u32) -> vec4<f32> {
    return vec4<f32>(a[i], a[i + 1u], a[i + 2u], a[i + 3u])
        + vec4<f32>(b[i], b[i + 1u], b[i + 2u], b[i + 3u]);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let index = wid.x + wid.y * nwg.x;
    let valid = index < p.n_groups;
    let base = index * p.group;
    let wide = (p.group & 3u) == 0u;
    var squares = 0.0;
    if (valid) {
        if (wide) {
            for (var i = 4u * lid; i < p.group; i += 4u * NORM_THREADS) {
                let v = sum4(base + i);
                sum[base + i] = v.x;
                sum[base + i + 1u] = v.y;
                sum[base + i + 2u] = v.z;
                sum[base + i + 3u] = v.w;
                squares += dot(v, v);
            }
        } else {
            for (var i = lid; i < p.group; i += NORM_THREADS) {
                let v = a[base + i] + b[base + i];
                sum[base + i] = v;
                squares += v * v;
            }
        }
    }
    let scale = 1.0 / sqrt(workgroup_sum(lid, squares) / f32(p.group) + p.eps);
    if (valid) {
        // Each invocation reads back the values it wrote.
        if (wide) {
            for (var i = 4u * lid; i < p.group; i += 4u * NORM_THREADS) {
                for (var j = i; j < i + 4u; j++) {
                    out[base + j] = (sum[base + j] * scale) * weight[j];
                }
            }
        } else {
            for (var i = lid; i < p.group; i += NORM_THREADS) {
                out[base + i] = (sum[base + i] * scale) * weight[i];
            }
        }
    }
}
