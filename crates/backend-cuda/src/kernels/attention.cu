// Causal attention over the paged f16 KV cache.
//
// One block of WARPS warps per (split, query head, token). The token's visible positions
// (its sequence's, up to its own, within the window) are cut into splits of `chunk`
// positions; the block's warps take its split's positions in turn, P at a time, each keeping
// an online softmax (running max, sum and weighted V) with the head's dimensions spread over
// its lanes.
// The warps' states are then merged. With one split the block writes the output; with
// several (flash-decoding: a few tokens over a long context fill the GPU by splitting their
// positions) it writes its unnormalized state, and `attention_combine` merges the splits.
//
// Position p of a token's sequence lives in slot
// (tables[table_start + (p >> block_shift)] << block_shift) | (p & block_mask).

#define WARPS 4
#define P 4  // positions a warp scores together
#define MAX_HEAD_DIM 256
#define PER_LANE (MAX_HEAD_DIM / 32)
// NVRTC has no math.h to define INFINITY.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
attention_partial(const float* q, const unsigned short* k_cache, const unsigned short* v_cache,
                  const unsigned int* positions, const unsigned int* table_starts,
                  const unsigned int* tables, float* out, float* partial,
                  unsigned int n_head, unsigned int n_head_kv, unsigned int head_dim_k,
                  unsigned int head_dim_v, unsigned int window, unsigned int block_shift,
                  float scale, unsigned int chunk) {
    __shared__ float state[WARPS][MAX_HEAD_DIM + 2];
    const unsigned int split = blockIdx.x, n_splits = gridDim.x;
    const unsigned int h = blockIdx.y, t = blockIdx.z;
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int kv_head = h / (n_head / n_head_kv);
    const unsigned int k_width = n_head_kv * head_dim_k, v_width = n_head_kv * head_dim_v;
    const unsigned int block_mask = (1u << block_shift) - 1;

    const unsigned int pos = positions[t];
    const SplitRange range = split_range(pos, window, split, chunk);
    const unsigned int lo = range.lo, hi = range.hi;
    const unsigned int* table = tables + table_starts[t];

    float qr[PER_LANE];
    const float* qh = q + ((unsigned long long)t * n_head + h) * head_dim_k;
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const unsigned int d = lane + 32 * i;
        qr[i] = d < head_dim_k ? qh[d] * scale : 0.0f;
    }

    float m = NEG_INF, l = 0.0f, acc[PER_LANE];
#pragma unroll
    for (int i = 0; i < PER_LANE; i++) acc[i] = 0.0f;

    // A warp takes P consecutive positions at a time and loads all their keys and values
    // before using any: one position at a time left a warp waiting on two memory latencies
    // per position.
    for (unsigned int p0 = lo + warp * P; p0 < hi; p0 += WARPS * P) {
        float kv[P][PER_LANE], vv[P][PER_LANE];
#pragma unroll
        for (int j = 0; j < P; j++) {
            // A position past the split's end reads position p0's row and gets weight 0.
            const unsigned int p = p0 + j < hi ? p0 + j : p0;
            const unsigned long long slot =
                ((unsigned long long)table[p >> block_shift] << block_shift) | (p & block_mask);
            const unsigned short* kr = k_cache + slot * k_width + kv_head * head_dim_k;
            const unsigned short* vr = v_cache + slot * v_width + kv_head * head_dim_v;
#pragma unroll
            for (int i = 0; i < PER_LANE; i++) {
                const unsigned int d = lane + 32 * i;
                kv[j][i] = d < head_dim_k ? h2f(kr[d]) : 0.0f;
                vv[j][i] = d < head_dim_v ? h2f(vr[d]) : 0.0f;
            }
        }
        float s[P];
#pragma unroll
        for (int j = 0; j < P; j++) {
            s[j] = 0.0f;
#pragma unroll
            for (int i = 0; i < PER_LANE; i++) s[j] += qr[i] * kv[j][i];
            s[j] = warp_sum(s[j]);
        }
        float m_new = m;
#pragma unroll
        for (int j = 0; j < P; j++)
            if (p0 + j < hi) m_new = fmaxf(m_new, s[j]);
        const float c = expf(m - m_new);
        float w[P];
        l = l * c;
#pragma unroll
        for (int j = 0; j < P; j++) {
            w[j] = p0 + j < hi ? expf(s[j] - m_new) : 0.0f;
            l += w[j];
        }
        m = m_new;
#pragma unroll
        for (int i = 0; i < PER_LANE; i++) {
            float a = acc[i] * c;
#pragma unroll
            for (int j = 0; j < P; j++) a += w[j] * vv[j][i];
            acc[i] = a;
        }
    }

#pragma unroll
    for (int i = 0; i < PER_LANE; i++) {
        const unsigned int d = lane + 32 * i;
        if (d < head_dim_v) state[warp][2 + d] = acc[i];
    }
    if (lane == 0) {
        state[warp][0] = m;
        state[warp][1] = l;
    }
    __syncthreads();

    float m_all = NEG_INF;
    for (int w = 0; w < WARPS; w++) m_all = fmaxf(m_all, state[w][0]);
    // A split past the token's last position saw nothing: its weights are all zero.
    float weights[WARPS], l_all = 0.0f;
    for (int w = 0; w < WARPS; w++) {
        weights[w] = m_all == NEG_INF ? 0.0f : expf(state[w][0] - m_all);
        l_all += state[w][1] * weights[w];
    }
    const unsigned long long row = (unsigned long long)t * n_head + h;
    if (n_splits == 1) {
        // Split 0 always holds the token's own position, so l_all > 0.
        for (unsigned int d = threadIdx.x; d < head_dim_v; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < WARPS; w++) o += state[w][2 + d] * weights[w];
            out[row * head_dim_v + d] = o / l_all;
        }
    } else {
        float* dst = partial + (row * n_splits + split) * (head_dim_v + 2);
        for (unsigned int d = threadIdx.x; d < head_dim_v; d += blockDim.x) {
            float o = 0.0f;
            for (int w = 0; w < WARPS; w++) o += state[w][2 + d] * weights[w];
            dst[2 + d] = o;
        }
        if (threadIdx.x == 0) {
            dst[0] = m_all;
            dst[1] = l_all;
        }
    }
}

// Merges the splits of each (token, head): one block of COMBINE_THREADS per (head, token).
// The splits' maxima and sums are loaded one split per thread, then the weighted outputs with
// the block's threads spread over dimensions and splits. One thread per dimension walking all
// the splits in turn (as this kernel first did) took 22.4 µs under ncu for the 65 splits of a
// 4096-token TinyLlama step, this form 11.6 µs: its last loop still waits on each split's
// load in turn.
#define COMBINE_THREADS 256
// The most splits attention.rs makes (MAX_SPLITS there): one weight each in shared memory.
#define MAX_SPLITS 1024

// The maximum (`is_max`) or the sum of every thread's `v`, in every thread; `scratch` holds a
// value per warp.
__device__ __forceinline__ float block_reduce(float v, bool is_max, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();  // an earlier reduction's readers are done with `scratch`
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
    __syncthreads();
    v = scratch[0];
    for (int w = 1; w < COMBINE_THREADS / 32; w++)
        v = is_max ? fmaxf(v, scratch[w]) : v + scratch[w];
    return v;
}

extern "C" __global__ void __launch_bounds__(COMBINE_THREADS)
attention_combine(const float* partial, float* out, unsigned int n_head,
                  unsigned int head_dim_v, unsigned int n_splits) {
    __shared__ float weight[MAX_SPLITS];
    __shared__ float sums[COMBINE_THREADS];
    __shared__ float scratch[COMBINE_THREADS / 32];
    const unsigned long long row = (unsigned long long)blockIdx.y * n_head + blockIdx.x;
    const unsigned int stride = head_dim_v + 2;
    const float* src = partial + row * n_splits * stride;

    // A split past the token's last position saw nothing (sum 0): weight 0, its output not
    // read.
    float m_max = NEG_INF;
    for (unsigned int s = threadIdx.x; s < n_splits; s += COMBINE_THREADS) {
        const float m = src[s * stride], l = src[s * stride + 1];
        weight[s] = l > 0.0f ? m : NEG_INF;
        if (l > 0.0f) m_max = fmaxf(m_max, m);
    }
    const float m_all = block_reduce(m_max, true, scratch);
    float l_sum = 0.0f;
    for (unsigned int s = threadIdx.x; s < n_splits; s += COMBINE_THREADS) {
        const float m = weight[s];
        const float w = m == NEG_INF ? 0.0f : expf(m - m_all);
        weight[s] = w;
        l_sum += w * src[s * stride + 1];
    }
    const float l_all = block_reduce(l_sum, false, scratch);  // also publishes `weight`

    // Thread (g, d) sums dimension d over the splits g, g + groups, ...
    const unsigned int groups = COMBINE_THREADS / head_dim_v;
    const unsigned int g = threadIdx.x / head_dim_v, d = threadIdx.x % head_dim_v;
    float o = 0.0f;
    if (g < groups) {
#pragma unroll 8
        for (unsigned int s = g; s < n_splits; s += groups) {
            const float w = weight[s];
            if (w != 0.0f) o += w * src[s * stride + 2 + d];
        }
    }
    sums[threadIdx.x] = o;
    __syncthreads();
    if (threadIdx.x < head_dim_v) {
        for (unsigned int k = 1; k < groups; k++) o += sums[k * head_dim_v + d];
        out[row * head_dim_v + d] = o / l_all;
    }
}
