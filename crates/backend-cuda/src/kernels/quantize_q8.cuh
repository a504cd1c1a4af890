// The steps of the 8-bit activation quantizer (the format and the outlier rule are described in
// matvec_q8.cu), shared by `quantize_q8` and by the kernels that quantize the rows they write
// (the decode step's norms and gated activation), so that both make the same bytes from the
// same values.
//
// A row of k values (k a multiple of 32) is spread over blocks of QUANTIZE_THREADS threads,
// QUANTIZE_VALUES values each (blockIdx.x says which). Every block gathers the whole row's
// magnitudes itself, in the same order (q8_add over the chunks of q8_batched_chunks), so that
// all of them find the same threshold without a second launch; block 0 lists the row's
// outliers; each warp then quantizes its block of 32.

// 512 threads a block: every block of a row gathers the whole row's magnitudes itself, in
// batches of loads one L2 round trip each, and with 256 a 11008-value row took three. On an
// H200 against 256 (tokens/s, same call): 7B Q4_K_M tg128 451 / 445 against 432 / 437; 4, 16
// and 64 sequences +3 to 6%; TinyLlama +3 to 5%. With 1024 (64 registers at most) 7B tg128
// was 429 / 431 (docs/benchmarks.md, 2026-11-29, fifth round).
#define QUANTIZE_THREADS 512
#define QUANTIZE_VALUES 512  // values that one block quantizes: 32 per warp

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

// The chunks of 4 values that each thread gathers, in this order: values 4 t .. 4 t + 3, then
// 4 QUANTIZE_THREADS further on, and so on (t the thread); in batches of Q8_BATCH: load(j, i)
// loads chunk i (value i on) into slot j of the batch for all of them, then use(j, i) takes them
// in order, so that a batch's loads are in flight together. (The first fused norms and gated
// activation, whose loads were not batched, spent 10.5 to 11.1 µs a launch in ncu.)
#define Q8_BATCH 4
template <class Load, class Use>
__device__ __forceinline__ void q8_batched_chunks(int k, Load load, Use use) {
    for (int i0 = 4 * (int)threadIdx.x; i0 < k; i0 += 4 * QUANTIZE_THREADS * Q8_BATCH) {
#pragma unroll
        for (int j = 0; j < Q8_BATCH; j++) {
            const int i = i0 + 4 * QUANTIZE_THREADS * j;
            if (i < k) load(j, i);
        }
#pragma unroll
        for (int j = 0; j < Q8_BATCH; j++) {
            const int i = i0 + 4 * QUANTIZE_THREADS * j;
            if (i < k) use(j, i);
        }
    }
}

// Adds the magnitudes of 4 values to a thread's sum and peak.
__device__ __forceinline__ void q8_add(float4 v, float& sum, float& peak) {
    sum += (fabsf(v.x) + fabsf(v.y)) + (fabsf(v.z) + fabsf(v.w));
    peak = fmaxf(peak, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
}

// The magnitude above which a value of the row (k values) is split off, from every thread's
// sum and peak: `factor` times the row's mean magnitude, or infinity where no value exceeds it
// (or the row holds a NaN or an infinity, which is wrong already and quantized as it is).
// Synchronizes the block (shared memory written before the call is visible after it).
__device__ __forceinline__ float q8_threshold(float sum, float peak, int k, float factor) {
    constexpr int n_warps = QUANTIZE_THREADS / 32;
    __shared__ float part_sum[n_warps], part_max[n_warps];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    sum = q8_warp_sum(sum);
    peak = q8_warp_max(peak);
    if (lane == 0) {
        part_sum[warp] = sum;
        part_max[warp] = peak;
    }
    __syncthreads();
    sum = 0.0f;
    peak = 0.0f;
#pragma unroll
    for (int w = 0; w < n_warps; w++) {
        sum += part_sum[w];
        peak = fmaxf(peak, part_max[w]);
    }
    const float mean = sum / (float)k;
    const float threshold = factor * mean;
    return isfinite(mean) && peak > threshold ? threshold : __int_as_float(0x7f800000);
}

// Block 0 of a row: lists the row's values above `threshold` in `out` ([count, column, value
// bits, ...], at most cap of them), in column order; value(i) is the row's value i. `count` is a
// shared word that the block zeroed before q8_threshold's synchronization. The warps find them
// in any order; the products add them up in list order, so the list is sorted, lest a row's
// product depend on how the warps were scheduled (unsorted, with 512 threads, where columns 37
// and 300 fall to two warps, the fused test's bit-for-bit comparison of the gated FFN failed,
// and the graph replays' comparison with steps run op by op).
template <class Value>
__device__ __forceinline__ void q8_list_outliers(Value value, int k, float threshold,
                                                 unsigned int* out, int cap,
                                                 unsigned int* count) {
    if (isfinite(threshold)) {
        for (int i = threadIdx.x; i < k; i += QUANTIZE_THREADS) {
            const float v = value(i);
            if (fabsf(v) > threshold) {
                const unsigned int slot = atomicAdd(count, 1u);
                if (slot < (unsigned int)cap) {
                    out[1 + 2 * slot] = i;
                    out[2 + 2 * slot] = __float_as_uint(v);
                }
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {  // an insertion sort: a row has few of them
            const unsigned int n = min(*count, (unsigned int)cap);
            for (unsigned int a = 1; a < n; a++) {
                const unsigned int column = out[1 + 2 * a], bits = out[2 + 2 * a];
                unsigned int b = a;
                for (; b > 0 && out[2 * b - 1] > column; b--) {
                    out[1 + 2 * b] = out[2 * b - 1];
                    out[2 + 2 * b] = out[2 * b];
                }
                out[1 + 2 * b] = column;
                out[2 + 2 * b] = bits;
            }
        }
    }
    if (threadIdx.x == 0) out[0] = min(*count, (unsigned int)cap);
}

// One warp quantizes a block of 32 values (v its lane's), those above `threshold` as zeros:
// their int8 values into qs[0..32] and the block's (d, sum) into *ds.
__device__ __forceinline__ void q8_block(float v, float threshold, signed char* __restrict__ qs,
                                         float2* __restrict__ ds) {
    const int lane = threadIdx.x & 31;
    if (fabsf(v) > threshold) v = 0.0f;
    const float amax = q8_warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const int q = amax == 0.0f ? 0 : __float2int_rn(v / d);
    // The sum of the quantized values, not of x: the offsets and mins then multiply the same x
    // as the quants do, and the product is exactly W · x̃ (x̃ the dequantized row), whose error
    // Σ w (x̃ − x) has centred weights. With the sum of x it was Σ d q (x̃ − x), q in 0..15 for
    // Q4_0: 3.7 times the variance (smollm2's Qcur-0 was 1.0e-2 off).
    const float block_sum = d * q8_warp_sum((float)q);
    qs[lane] = (signed char)q;
    if (lane == 0) *ds = make_float2(d, block_sum);
}

// The 8-bit rows of n rows of k values: qs (k per row), ds (k / 32 per row), outliers
// (1 + 2 cap words per row), and the row's `cap` and the factor of its outlier rule.
struct Q8Rows {
    signed char* qs;
    float2* ds;
    unsigned int* outliers;
    int cap;
    float factor;
};

// The end of every kernel that quantizes rows: with its thread's sum and peak gathered, the
// block's own value of `mine` (QUANTIZE_VALUES of them in shared memory, the block's slice of
// row blockIdx.y) quantized into q, the outliers listed by block 0 (value(i): the row's value
// i, computed as the slice's values were). `count` is a shared word, zeroed by thread 0 before.
template <class Value>
__device__ __forceinline__ void q8_finish(float sum, float peak, const float* mine, Value value,
                                          int k, Q8Rows q, unsigned int* count) {
    const int row = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float threshold = q8_threshold(sum, peak, k, q.factor);
    if (blockIdx.x == 0)
        q8_list_outliers(value, k, threshold, q.outliers + (long long)row * (1 + 2 * q.cap), q.cap,
                         count);
    const int b = QUANTIZE_VALUES / 32 * blockIdx.x + warp;
    if (b < k / 32)
        q8_block(mine[32 * warp + lane], threshold, q.qs + (long long)row * k + 32 * b,
                 q.ds + (long long)row * (k / 32) + b);
}
