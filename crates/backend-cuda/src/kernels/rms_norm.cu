// RMSNorm of each group of `group` consecutive floats (a row, or one head of a row): one
// block per group.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void rms_norm(const float* x, const float* weight, float* out,
                                    unsigned int group, float eps) {
    start_dependents();
    wait_for_producers();
    __shared__ float warp_sums[32];
    const unsigned long long base = (unsigned long long)blockIdx.x * group;
    const float* xg = x + base;
    float sum = 0.0f;
    for (unsigned int i = threadIdx.x; i < group; i += blockDim.x) sum += xg[i] * xg[i];
    sum = warp_sum(sum);
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        sum = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        sum = warp_sum(sum);
        if (lane == 0) warp_sums[0] = sum;
    }
    __syncthreads();
    const float inv = rsqrtf(warp_sums[0] / group + eps);
    for (unsigned int i = threadIdx.x; i < group; i += blockDim.x)
        out[base + i] = xg[i] * inv * weight[i];
}
