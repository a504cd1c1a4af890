// RMSNorm of each group of `group` consecutive floats (a row, or one head of a row): one
// block per group; for decoding, rms_norm_q8 also writes the rows' 8-bit rows (norm_q8.cuh).

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

// rms_norm of rows of one group each (k values, k a multiple of 32), with their 8-bit rows
// for the products (norm_q8.cuh).
extern "C" __global__ void __launch_bounds__(QUANTIZE_THREADS)
    rms_norm_q8(const float* x, const float* weight, float* out, int k, float eps,
                float factor, signed char* qs, float2* ds,
                unsigned int* outliers, int cap) {
    start_dependents();
    wait_for_producers();
    norm_rows_q8(RowOf{x}, weight, nullptr, out, k, eps,
                 Q8Rows{qs, ds, outliers, cap, factor});
}
