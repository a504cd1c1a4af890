// (After quantize_q8.cuh.) The decode step's RMSNorm of rows that are one group each (k values,
// k a multiple of 32), writing besides the normalized rows their 8-bit rows for the products
// that read them. A row is spread over blocks as quantize_q8 spreads it (grid
// (⌈k / QUANTIZE_VALUES⌉, rows), QUANTIZE_THREADS threads), and each block writes only its
// slice; a block per row that quantized its whole row on one SM made the norm 3.96 → 6.66 µs
// (docs/benchmarks.md).
//
// Each block sums the whole row's squares itself, in rms_norm.cu's order: that of a block of
// norm_threads threads, whose warp w is taken here by warp w mod (QUANTIZE_THREADS / 32), so that
// every block finds the same scale and the output is bit for bit rms_norm's (and add_rms_norm's,
// which sums in the same order). A second pass (from L1) gathers the normalized row's magnitudes
// in quantize_q8's order, keeping the block's own slice in shared memory, whence come both its
// f32 output and its 8-bit values.

// The values of a row before the norm: x, for rms_norm.
struct RowOf {
    const float* x;
    __device__ __forceinline__ float at(long long i) const { return x[i]; }
    __device__ __forceinline__ float4 at4(long long i) const { return *(const float4*)(x + i); }
};

// in: the rows before the norm (indexed from the first row's start); sum_out, where set, gets
// the block's slice of them (add_rms_norm's sum).
template <class Input>
__device__ __forceinline__ void norm_rows_q8(Input in, const float* __restrict__ weight,
                                             float* __restrict__ sum_out, float* __restrict__ out,
                                             int k, float eps, int norm_threads, Q8Rows q) {
    __shared__ float warp_sums[32];
    __shared__ __align__(16) float mine[QUANTIZE_VALUES];
    __shared__ unsigned int count;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, virtual_warps = norm_threads / 32;
    const long long base = (long long)blockIdx.y * k;
    for (int vw = warp; vw < virtual_warps; vw += QUANTIZE_THREADS / 32) {
        float ss = 0.0f;
        for (int i = 32 * vw + lane; i < k; i += norm_threads) {
            const float s = in.at(base + i);
            ss += s * s;
        }
        ss = q8_warp_sum(ss);
        if (lane == 0) warp_sums[vw] = ss;
    }
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    // Every warp adds the warp sums as rms_norm's warp 0 does, and finds the same total.
    const float ss = q8_warp_sum(lane < virtual_warps ? warp_sums[lane] : 0.0f);
    const float inv = rsqrtf(ss / (float)k + eps);

    const int first = QUANTIZE_VALUES * blockIdx.x;
    float sum = 0.0f, peak = 0.0f;
    q8_stats_chunks(i, k) {
        const float4 s = in.at4(base + i), w = *(const float4*)(weight + i);
        const float4 o = make_float4(s.x * inv * w.x, s.y * inv * w.y, s.z * inv * w.z,
                                     s.w * inv * w.w);
        q8_add(o, sum, peak);
        if (i >= first && i < first + QUANTIZE_VALUES) {
            *(float4*)(mine + i - first) = o;
            *(float4*)(out + base + i) = o;
            if (sum_out != nullptr) *(float4*)(sum_out + base + i) = s;
        }
    }
    q8_finish(sum, peak, mine, [&](int i) { return in.at(base + i) * inv * weight[i]; }, k, q,
              &count);
}
