// (After quantize_q8.cuh.) The decode step's RMSNorm of rows that are one group each (k values,
// k a multiple of 32), writing besides the normalized rows their 8-bit rows for the products
// that read them. A row is spread over blocks as quantize_q8 spreads it (grid
// (⌈k / QUANTIZE_VALUES⌉, rows), QUANTIZE_THREADS threads), and each block writes only its
// slice; a block per row that quantized its whole row on one SM made the norm 3.96 → 6.66 µs
// (docs/benchmarks.md).
//
// Each block sums the whole row's squares itself, in one order, so that every block finds the
// same scale: over quantize_q8's chunks, loaded in batches (q8_batched_chunks). (A first form
// summed in rms_norm.cu's order, that of a block of up to 1024 threads, a value at a time:
// 10.5 µs a norm of a 4096-value row in ncu, against 5.4 for rms_norm and 3.4 for
// quantize_q8.) A second pass over the same chunks (from L1) gathers the
// normalized row's magnitudes in quantize_q8's order, keeping the block's own slice in shared
// memory, whence come both its f32 output and its 8-bit values. The f32 rows differ from
// rms_norm's in the last bits only (another order of the squares' sum).

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
                                             int k, float eps, Q8Rows q) {
    __shared__ float part[QUANTIZE_THREADS / 32];
    __shared__ __align__(16) float mine[QUANTIZE_VALUES];
    __shared__ unsigned int count;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long base = (long long)blockIdx.y * k;
    float4 s[Q8_BATCH], w[Q8_BATCH];
    float ss = 0.0f;
    q8_batched_chunks(
        k, [&](int j, int i) { s[j] = in.at4(base + i); },
        [&](int j, int i) {
            ss = fmaf(s[j].x, s[j].x, ss);
            ss = fmaf(s[j].y, s[j].y, ss);
            ss = fmaf(s[j].z, s[j].z, ss);
            ss = fmaf(s[j].w, s[j].w, ss);
        });
    ss = q8_warp_sum(ss);
    if (lane == 0) part[warp] = ss;
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int p = 0; p < QUANTIZE_THREADS / 32; p++) ss += part[p];
    const float inv = rsqrtf(ss / (float)k + eps);

    const int first = QUANTIZE_VALUES * blockIdx.x;
    float sum = 0.0f, peak = 0.0f;
    q8_batched_chunks(
        k,
        [&](int j, int i) {
            s[j] = in.at4(base + i);
            w[j] = *(const float4*)(weight + i);
        },
        [&](int j, int i) {
            const float4 o = make_float4(s[j].x * inv * w[j].x, s[j].y * inv * w[j].y,
                                         s[j].z * inv * w[j].z, s[j].w * inv * w[j].w);
            q8_add(o, sum, peak);
            if (i >= first && i < first + QUANTIZE_VALUES) {
                *(float4*)(mine + i - first) = o;
                *(float4*)(out + base + i) = o;
                if (sum_out != nullptr) *(float4*)(sum_out + base + i) = s[j];
            }
        });
    q8_finish(sum, peak, mine, [&](int i) { return in.at(base + i) * inv * weight[i]; }, k, q,
              &count);
}
