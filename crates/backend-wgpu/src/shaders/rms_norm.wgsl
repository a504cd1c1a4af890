// RMSNorm of each group of `group` consecutive values (a row, or a head): one workgroup per
// group sums the squares in f32. 256 invocations, each reading four values at a time where
// the group is whole vec4s: a loop over a 4096-wide row is then 4 loads long per invocation
// instead of 64 (on the H200 through Vulkan, 64 invocations reading one value at a time took
// 49 µs for one row, each load waiting for the one before).

struct Params {
    n_groups: u32,
    group: u32,
    eps: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// The four values of x (and out, and the weight) from `i`, a multiple of 4.
fn x4(i: u32) -> vec4<f32> {
    return vec4<f32>(x[i], x[i + 1u], x[i + 2u], x[i + 3u]);
}

fn weight4(i: u32) -> vec4<f32> {
    return vec4<f32>(weight[i], weight[i + 1u], weight[i + 2u], weight[i + 3u]);
}

fn store4(i: u32, v: vec4<f32>) {
    out[i] = v.x;
    out[i + 1u] = v.y;
    out[i + 2u] = v.z;
    out[i + 3u] = v.w;
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
    // Whole vec4s: four values per step; else one.
    let wide = (p.group & 3u) == 0u;
    var squares = 0.0;
    if (valid) {
        if (wide) {
            for (var i = 4u * lid; i < p.group; i += 4u * NORM_THREADS) {
                let v = x4(base + i);
                squares += dot(v, v);
            }
        } else {
            for (var i = lid; i < p.group; i += NORM_THREADS) {
                let v = x[base + i];
                squares += v * v;
            }
        }
    }
    let scale = 1.0 / sqrt(workgroup_sum(lid, squares) / f32(p.group) + p.eps);
    if (valid) {
        if (wide) {
            for (var i = 4u * lid; i < p.group; i += 4u * NORM_THREADS) {
                store4(base + i, (x4(base + i) * scale) * weight4(i));
            }
        } else {
            for (var i = lid; i < p.group; i += NORM_THREADS) {
                out[base + i] = (x[base + i] * scale) * weight[i];
            }
        }
    }
}
