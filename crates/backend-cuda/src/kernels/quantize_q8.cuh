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

// One block of a row (block 0 in q8_finish, the last in q8_finish_slices): lists the row's
// values above `threshold` in `out` ([count, column, value bits, ...], at most cap of them), in
// column order; value(i) is the row's value i. `count` is a
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

// Quantizing by slices: for a kernel whose values are dear to compute (the gated activation),
// every block computes only its slice of the row (QUANTIZE_VALUES values, one a thread), not
// the whole row as q8_finish's callers do for the row's statistics. Each block quantizes its
// slice as if the row had no outliers, then publishes the slice's magnitude sum and peak; the
// last of the row's blocks to finish adds them up. Where the row's peak is clearly below the
// outlier threshold, the bytes written are q8_finish's: with no value above the threshold, a
// block quantizes its values as it would with none. Otherwise (a row with outliers, near ties,
// NaN or infinity) the last block quantizes the whole row again as q8_finish does, the
// threshold from q8_finish's sum, in q8_finish's order, so that both give the same bytes in
// every case.
//
// The slices' sums are added in another order than q8_finish's, so the two means differ by a
// few units in their last place (a sum of k magnitudes is off by at most k · 2^-24 of itself);
// a peak at most 15/16 of the threshold from the slices' sums is below q8_finish's for rows
// of up to 2^19 values.
#define Q8_CLEAR_MARGIN (15.0f / 16.0f)

// The end of a kernel that quantizes by slices: v is this thread's value (value
// QUANTIZE_VALUES · blockIdx.x + threadIdx.x of row blockIdx.y, 0 past the row's end),
// value(i) the row's value i, computed as v was. partials holds a (sum, peak) per block of
// the grid; counters[row] is zero before the kernel and is left zero after it (the last block
// resets it), so that the next launch, and a graph's next replay, find it so.
template <class Value>
__device__ __forceinline__ void q8_finish_slices(float v, Value value, int k, Q8Rows q,
                                                 float2* partials, unsigned int* counters) {
    static_assert(QUANTIZE_VALUES == QUANTIZE_THREADS, "a value a thread");
    constexpr int n_warps = QUANTIZE_THREADS / 32;
    __shared__ float slice_sum[n_warps], slice_max[n_warps];
    __shared__ unsigned int count;
    __shared__ int last, clear;
    const int row = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const float none = __int_as_float(0x7f800000);
    const int b = QUANTIZE_VALUES / 32 * blockIdx.x + warp;
    if (b < k / 32)
        q8_block(v, none, q.qs + (long long)row * k + 32 * b, q.ds + (long long)row * (k / 32) + b);
    const float sum = q8_warp_sum(fabsf(v)), peak = q8_warp_max(fabsf(v));
    if (lane == 0) {
        slice_sum[warp] = sum;
        slice_max[warp] = peak;
    }
    // Every thread's writes come before thread 0's fence and count (as a grid barrier's do).
    __syncthreads();
    float2* row_partials = partials + (long long)row * gridDim.x;
    if (threadIdx.x == 0) {
        float s = 0.0f, p = 0.0f;
#pragma unroll
        for (int w = 0; w < n_warps; w++) {
            s += slice_sum[w];
            p = fmaxf(p, slice_max[w]);
        }
        row_partials[blockIdx.x] = make_float2(s, p);
        __threadfence();
        last = atomicAdd(counters + row, 1u) == gridDim.x - 1;
        count = 0;
    }
    __syncthreads();
    if (!last) return;
    // The slices' pairs, read by a warp at once (one thread read them in turn: 4.6 µs a
    // launch of 7B's gated activation in ncu, 4.3 so).
    if (warp == 0) {
        __threadfence();
        float s = 0.0f, p = 0.0f;
        for (unsigned int i = lane; i < gridDim.x; i += 32) {
            const float2 part = row_partials[i];
            s += part.x;
            p = fmaxf(p, part.y);
        }
        s = q8_warp_sum(s);
        p = q8_warp_max(p);
        if (lane == 0) {
            const float mean = s / (float)k;
            clear = isfinite(mean) && p <= q.factor * mean * Q8_CLEAR_MARGIN;
            counters[row] = 0;
        }
    }
    __syncthreads();
    unsigned int* row_outliers = q.outliers + (long long)row * (1 + 2 * q.cap);
    if (clear) {
        if (threadIdx.x == 0) row_outliers[0] = 0;
        return;
    }
    // The whole row as q8_finish quantizes it: its sum and peak over q8_batched_chunks's chunks
    // in their order, its outliers, and every block of 32 again.
    float s = 0.0f, p = 0.0f;
    for (int i = 4 * (int)threadIdx.x; i < k; i += 4 * QUANTIZE_THREADS)
        q8_add(make_float4(value(i), value(i + 1), value(i + 2), value(i + 3)), s, p);
    const float threshold = q8_threshold(s, p, k, q.factor);
    q8_list_outliers(value, k, threshold, row_outliers, q.cap, &count);
    for (int bb = warp; bb < k / 32; bb += n_warps)
        q8_block(value(32 * bb + lane), threshold, q.qs + (long long)row * k + 32 * bb,
                 q.ds + (long long)row * (k / 32) + bb);
}
