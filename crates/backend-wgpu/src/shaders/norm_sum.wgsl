// The sum over a workgroup of NORM_THREADS invocations, for the RMSNorm kernels
// (`rms_norm.wgsl`, `add_rms_norm.wgsl`): a tree in workgroup memory, every invocation
// getting the total.

const NORM_THREADS: u32 = 256u;

var<workgroup> partial_sums: array<f32, NORM_THREADS>;

fn workgroup_sum(lid: u32, value: f32) -> f32 {
    partial_sums[lid] = value;
    workgroupBarrier();
    for (var s = NORM_THREADS / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial_sums[lid] += partial_sums[lid + s];
        }
        workgroupBarrier();
    }
    return partial_sums[0];
}
