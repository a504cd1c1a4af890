// The k largest logits of each row, on the device, so that sampling needs only k (id, value)
// pairs per row on the host. One block per row; k rounds, each a block-wide maximum over the
// row of the elements ranked below the previous round's winner.
//
// Ranking (crate::batch::top_k's): larger values first, NaN as -inf, ties to the lower id. An
// element's rank is one 64-bit key, the float's bits mapped to an unsigned order in the high
// half and the complemented id in the low half, so a round is one maximum of keys.

#define THREADS 1024

__device__ __forceinline__ unsigned long long rank_key(float v, unsigned int id) {
    unsigned int bits = __float_as_uint(v);
    if (v != v) bits = 0xff800000u;  // NaN ranks as -inf
    // Order-preserving map of IEEE bits to unsigned (total order: -0 below +0).
    const unsigned int ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
    return ((unsigned long long)ordered << 32) | (0xffffffffu - id);
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, v, o);
        v = other > v ? other : v;
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(THREADS)
top_k(const float* logits, unsigned int width, unsigned int k, unsigned int* ids, float* values) {
    start_dependents();
    wait_for_producers();
    __shared__ unsigned long long warp_best[THREADS / 32];
    const float* row = logits + (unsigned long long)blockIdx.x * width;
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // Keys start at 1 (id 0xffffffff never occurs), so 0 means "nothing left".
    unsigned long long bound = ~0ull;
    for (unsigned int r = 0; r < k; r++) {
        unsigned long long best = 0;
        for (unsigned int i = threadIdx.x; i < width; i += THREADS) {
            const unsigned long long key = rank_key(row[i], i);
            if (key < bound && key > best) best = key;
        }
        best = warp_max(best);
        if (lane == 0) warp_best[warp] = best;
        __syncthreads();
        if (warp == 0) {
            best = warp_max(lane < THREADS / 32 ? warp_best[lane] : 0);
            if (lane == 0) warp_best[0] = best;
        }
        __syncthreads();
        bound = warp_best[0];
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned int id = 0xffffffffu - (unsigned int)bound;
            ids[(unsigned long long)blockIdx.x * k + r] = id;
            values[(unsigned long long)blockIdx.x * k + r] = row[id];
        }
    }
}
