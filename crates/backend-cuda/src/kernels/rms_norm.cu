// RMSNorm of each group of `group` consecutive floats (a row, or one head of a row): one
// block per group.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// With qs set (one group per row, of a multiple of 32 values), each block then quantizes its
// row of out to 8 bits as quantize_q8 does (quantize_q8.cuh), for the products that read it.
extern "C" __global__ void rms_norm(const float* x, const float* weight, float* out,
                                    unsigned int group, float eps, float factor,
                                    signed char* qs, float2* ds, u32* outliers, int cap) {
    __shared__ float warp_sums[64];
    __shared__ u32 count;
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
    if (qs != nullptr) {
        // Every value of the row is written before any thread reads it back.
        __syncthreads();
        q8_row(out + base, group, factor, qs + base, ds + base / 32,
               outliers + (unsigned long long)blockIdx.x * (1 + 2 * cap), cap, warp_sums, &count);
    }
}
