// The steps of the 8-bit activation quantizer (the format and the outlier rule are described
// in matvec_q8.cu), shared by `quantize_q8` and by the norms that quantize the rows they write.
// Each takes a whole block of threads (a multiple of 32, at most 1024) and needs the u32 of
// blocks.cuh.

__device__ __forceinline__ float q8_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}
__device__ __forceinline__ float q8_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
}

// The magnitude above which a value of row xr (k values, k a multiple of 4) is split off:
// `factor` times the row's mean magnitude, or infinity where no value exceeds it (or the row
// holds a NaN or an infinity, and is quantized as it is). Every block that calls it for one
// row gets the same answer. `scratch` holds 64 floats of shared memory; ends with the block
// synchronized.
__device__ float q8_threshold(const float* __restrict__ xr, int k, float factor,
                              float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float sum = 0.0f, peak = 0.0f;
    for (int i = 4 * threadIdx.x; i < k; i += 4 * blockDim.x) {
        const float4 v = *(const float4*)(xr + i);
        sum += (fabsf(v.x) + fabsf(v.y)) + (fabsf(v.z) + fabsf(v.w));
        peak = fmaxf(peak, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
    sum = q8_warp_sum(sum);
    peak = q8_warp_max(peak);
    if (lane == 0) {
        scratch[warp] = sum;
        scratch[32 + warp] = peak;
    }
    __syncthreads();
    sum = 0.0f;
    peak = 0.0f;
    for (int w = 0; w < warps; w++) {
        sum += scratch[w];
        peak = fmaxf(peak, scratch[32 + w]);
    }
    const float threshold = factor * (sum / (float)k);
    __syncthreads();
    return isfinite(threshold) && peak > threshold ? threshold : __int_as_float(0x7f800000);
}

// Lists row xr's values above `threshold` in `out` ([count, column, value bits, ...], at most
// cap of them). `count` is a shared word; ends with the block synchronized.
__device__ void q8_list_outliers(const float* __restrict__ xr, int k, float threshold,
                                 u32* __restrict__ out, int cap, u32* count) {
    if (threadIdx.x == 0) *count = 0;
    __syncthreads();
    if (isfinite(threshold)) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) {
            const float v = xr[i];
            if (fabsf(v) > threshold) {
                const u32 slot = atomicAdd(count, 1u);
                if (slot < (u32)cap) {
                    out[1 + 2 * slot] = i;
                    out[2 + 2 * slot] = __float_as_uint(v);
                }
            }
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) out[0] = min(*count, (u32)cap);
}

// One warp quantizes values 32 b .. 32 b + 32 of row xr, those above `threshold` as zeros:
// their int8 values into qs and the block's (d, sum) into ds[b].
__device__ __forceinline__ void q8_block(const float* __restrict__ xr, int b, float threshold,
                                         signed char* __restrict__ qs,
                                         float2* __restrict__ ds) {
    const int lane = threadIdx.x & 31;
    float v = xr[32 * b + lane];
    if (fabsf(v) > threshold) v = 0.0f;
    const float amax = q8_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
    // The sum of the quantized values, not of x: the offsets and mins then multiply the same
    // x as the quants do, and the product is exactly W · x̃ (x̃ the dequantized row), whose
    // error Σ w (x̃ − x) has centred weights. With the sum of x it was Σ d q (x̃ − x), q in
    // 0..15 for Q4_0: 3.7 times the variance (smollm2's Qcur-0 was 1.0e-2 off).
    const float block_sum = d * q8_warp_sum((float)q);
    qs[32 * b + lane] = (signed char)q;
    if (lane == 0) ds[b] = make_float2(d, block_sum);
}

// Quantizes the whole row xr with the whole block: threshold, outliers, every block of 32.
// `scratch` holds 64 floats and `count` one word of shared memory.
__device__ void q8_row(const float* __restrict__ xr, int k, float factor,
                       signed char* __restrict__ qs, float2* __restrict__ ds,
                       u32* __restrict__ outliers, int cap, float* scratch, u32* count) {
    const float threshold = q8_threshold(xr, k, factor, scratch);
    q8_list_outliers(xr, k, threshold, outliers, cap, count);
    for (int b = threadIdx.x >> 5; b < k / 32; b += blockDim.x >> 5) q8_block(xr, b, threshold, qs, ds);
}
