// Flash-decoding: causal attention of a few tokens over long contexts in the paged f16 KV
// cache, which at best runs as fast as the keys and values stream in.
//
// One block of DECODE_WARPS warps per (split, KV head and up to GM of its query heads,
// token). The heads that share a KV head (grouped-query attention) are the block's, so each
// key and value row is read once for all of them.
//
// The block copies its split's rows into shared memory with asynchronous copies, a stage of
// STAGE_POSITIONS rows (16 KB of keys and values) at a time, the next stage in flight while
// one is used: 32 KB of loads in flight per block, however many registers its heads' state
// takes (with the loads in registers, a block of 8 heads, 2 to a multiprocessor, had 8 KB in
// flight). Under ncu, at 4097 positions in splits of one stage, this kernel took as long as
// the register form: TinyLlama 9.4 against 9.6 µs, at 9% of the DRAM bandwidth and 32% of the
// SMs' throughput (the loads in flight do not bound it there), 7B 20.6 against 20.9 µs at 70%.
//
// From shared memory, a row of HD halves is read by HD / 8 lanes, 16 bytes each, so a warp
// covers 32 / (HD / 8) positions per read, U such reads at a time. Each lane row keeps its
// own online softmax (running max, sum and weighted V over its 8 dimensions) in base 2, the
// queries scaled by log2(e); the rows of a warp are merged with shuffles, the warps through
// shared memory. With one split the block writes the output; with several it writes each
// head's unnormalized state, its max in natural units, for `attention_combine`
// (attention.cu) to merge.
//
// Position p of a token's sequence lives in slot
// (tables[table_start + (p >> block_shift)] << block_shift) | (p & block_mask).

#define DECODE_WARPS 4
// NVRTC has no math.h to define INFINITY.
#define NEG_INF __int_as_float(0xff800000)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// The 8 halves of a 16-byte load as floats.
__device__ __forceinline__ void halves8(uint4 w, float* f) {
    const unsigned int words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = h2f((unsigned short)(words[i] & 0xffffu));
        f[2 * i + 1] = h2f((unsigned short)(words[i] >> 16));
    }
}

template <int HD, int GM>
__device__ __forceinline__ void attention_decode(
    const float* q, const unsigned short* k_cache, const unsigned short* v_cache,
    const unsigned int* positions, const unsigned int* table_starts, const unsigned int* tables,
    float* out, float* partial, unsigned int n_head, unsigned int n_head_kv, unsigned int window,
    unsigned int block_shift, float scale, unsigned int chunk) {
    constexpr int L = HD / 8;               // lanes per row
    constexpr int R = 32 / L;               // rows (positions) per warp and read
    constexpr int U = GM <= 2 ? 4 : 2;      // reads of keys and values per lane and step
    constexpr int STEP = DECODE_WARPS * R * U;  // positions the block takes per step
    constexpr int STAGE_POSITIONS = 4096 / HD;  // 8 KB of keys, 8 KB of values
    constexpr int STAGE_PIECES = STAGE_POSITIONS * L;  // 16-byte pieces of keys per stage
    static_assert(STAGE_POSITIONS % STEP == 0, "a stage is whole steps");
    static_assert(STAGE_PIECES % (DECODE_WARPS * 32) == 0, "every thread copies as many");
    // Two stages of keys and values while the positions are read; the warps' states after.
    constexpr int STAGES_BYTES = 2 * 2 * STAGE_PIECES * 16;
    constexpr int STATE_BYTES = DECODE_WARPS * GM * (HD + 2) * 4;
    __shared__ uint4 smem[(STAGES_BYTES > STATE_BYTES ? STAGES_BYTES : STATE_BYTES) / 16];
    uint4* stages = smem;
    float(*state)[GM][HD + 2] = reinterpret_cast<float(*)[GM][HD + 2]>(smem);

    const unsigned int split = blockIdx.x, n_splits = gridDim.x, t = blockIdx.z;
    const unsigned int group = n_head / n_head_kv;
    const unsigned int parts = (group + GM - 1) / GM;  // blocks per KV head
    const unsigned int kv_head = blockIdx.y / parts;
    const unsigned int h0 = kv_head * group + (blockIdx.y % parts) * GM;
    const unsigned int nh = min((unsigned int)GM, kv_head * group + group - h0);
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int row = lane / L, c = lane % L;
    const unsigned int width = n_head_kv * HD;
    const unsigned int block_mask = (1u << block_shift) - 1;

    const unsigned int pos = positions[t];
    const SplitRange range = split_range(pos, window, split, chunk);
    const unsigned int lo = range.lo, hi = range.hi;
    const unsigned int* table = tables + table_starts[t];

    float qv[GM][8];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        if (g < nh) {
            const float4* qh = reinterpret_cast<const float4*>(
                q + ((unsigned long long)t * n_head + h0 + g) * HD + c * 8);
            const float4 a = qh[0], b = qh[1];
            const float s = scale * LOG2E;
            qv[g][0] = a.x * s, qv[g][1] = a.y * s, qv[g][2] = a.z * s, qv[g][3] = a.w * s;
            qv[g][4] = b.x * s, qv[g][5] = b.y * s, qv[g][6] = b.z * s, qv[g][7] = b.w * s;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) qv[g][i] = 0.0f;
        }
    }

    float m[GM], l[GM], acc[GM][8];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        m[g] = NEG_INF, l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) acc[g][i] = 0.0f;
    }

    // Stage `stage`'s rows into buffer `stage % 2`, as one group of copies (an empty one past
    // the split's end, so that every step waits for the same number of groups). Rows past the
    // split's end are zeros: weight 0, and no NaN from stale memory times that weight.
    const unsigned short* k_head = k_cache + kv_head * HD;
    const unsigned short* v_head = v_cache + kv_head * HD;
    const unsigned int n_stages = hi > lo ? (hi - lo + STAGE_POSITIONS - 1) / STAGE_POSITIONS : 0;
    auto stage_rows = [&](unsigned int stage) {
        if (stage < n_stages) {
            uint4* ks = stages + (stage % 2) * 2 * STAGE_PIECES;
            uint4* vs = ks + STAGE_PIECES;
#pragma unroll
            for (int i = 0; i < STAGE_PIECES / (DECODE_WARPS * 32); i++) {
                const unsigned int piece = threadIdx.x + i * DECODE_WARPS * 32;
                const unsigned int p = lo + stage * STAGE_POSITIONS + piece / L;
                const bool valid = p < hi;
                const unsigned int pp = valid ? p : lo;
                const unsigned long long at =
                    (((unsigned long long)table[pp >> block_shift] << block_shift) |
                     (pp & block_mask)) * width + (piece % L) * 8;
                copy_async_16_or_zero(ks + piece, k_head + at, valid);
                copy_async_16_or_zero(vs + piece, v_head + at, valid);
            }
        }
        copy_async_commit();
    };
    stage_rows(0);
    stage_rows(1);
    for (unsigned int stage = 0; stage < n_stages; stage++) {
        copy_async_wait<1>();
        __syncthreads();
        const uint4* ks = stages + (stage % 2) * 2 * STAGE_PIECES;
        const uint4* vs = ks + STAGE_PIECES;
        const unsigned int stage_lo = lo + stage * STAGE_POSITIONS;
#pragma unroll
        for (int k = 0; k < STAGE_POSITIONS / STEP; k++) {
            uint4 kr[U], vr[U];
            bool valid[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const unsigned int j = k * STEP + warp * R * U + u * R + row;
                valid[u] = stage_lo + j < hi;
                kr[u] = ks[j * L + c];
                vr[u] = vs[j * L + c];
            }
            float s[U][GM];
#pragma unroll
            for (int u = 0; u < U; u++) {
                float kf[8];
                halves8(kr[u], kf);
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    float d = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; i++) d += qv[g][i] * kf[i];
#pragma unroll
                    for (int o = L / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    s[u][g] = d;
                }
            }
            float vf[U][8];
#pragma unroll
            for (int u = 0; u < U; u++) halves8(vr[u], vf[u]);
#pragma unroll
            for (int g = 0; g < GM; g++) {
                float m_new = m[g];
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (valid[u]) m_new = fmaxf(m_new, s[u][g]);
                // Only a row whose positions all lie past the split's end sees nothing yet.
                if (m_new == NEG_INF) continue;
                const float corr = exp2f(m[g] - m_new);
                float w[U], sum = 0.0f;
#pragma unroll
                for (int u = 0; u < U; u++) {
                    w[u] = valid[u] ? exp2f(s[u][g] - m_new) : 0.0f;
                    sum += w[u];
                }
                l[g] = l[g] * corr + sum;
                m[g] = m_new;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    float a = acc[g][i] * corr;
#pragma unroll
                    for (int u = 0; u < U; u++) a += w[u] * vf[u][i];
                    acc[g][i] = a;
                }
            }
        }
        // Every warp is done with this buffer before the stage after next overwrites it.
        __syncthreads();
        stage_rows(stage + 2);
    }

    // The warp's rows into its first row, lane by lane of the same dimensions.
#pragma unroll
    for (int o = L; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
            const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
            const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
            float acc_o[8];
#pragma unroll
            for (int i = 0; i < 8; i++) acc_o[i] = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
            const float m_new = fmaxf(m[g], m_o);
            if (m_new == NEG_INF) continue;
            const float a = exp2f(m[g] - m_new), b = exp2f(m_o - m_new);
            l[g] = l[g] * a + l_o * b;
#pragma unroll
            for (int i = 0; i < 8; i++) acc[g][i] = acc[g][i] * a + acc_o[i] * b;
            m[g] = m_new;
        }
    }
    if (row == 0) {
#pragma unroll
        for (int g = 0; g < GM; g++) {
#pragma unroll
            for (int i = 0; i < 8; i++) state[warp][g][2 + c * 8 + i] = acc[g][i];
            if (c == 0) {
                state[warp][g][0] = m[g];
                state[warp][g][1] = l[g];
            }
        }
    }
    __syncthreads();

    for (unsigned int e = threadIdx.x; e < nh * HD; e += blockDim.x) {
        const unsigned int g = e / HD, d = e % HD;
        float m_all = NEG_INF;
#pragma unroll
        for (int w = 0; w < DECODE_WARPS; w++) m_all = fmaxf(m_all, state[w][g][0]);
        float l_all = 0.0f, o = 0.0f;
        // A split past the token's last position saw nothing: its weights are all zero.
        if (m_all != NEG_INF) {
#pragma unroll
            for (int w = 0; w < DECODE_WARPS; w++) {
                const float f = exp2f(state[w][g][0] - m_all);
                l_all += state[w][g][1] * f;
                o += state[w][g][2 + d] * f;
            }
        }
        const unsigned long long hrow = (unsigned long long)t * n_head + h0 + g;
        if (n_splits == 1) {
            // The one split holds the token's own position, so l_all > 0.
            out[hrow * HD + d] = o / l_all;
        } else {
            float* dst = partial + (hrow * n_splits + split) * (HD + 2);
            dst[2 + d] = o;
            if (d == 0) {
                dst[0] = m_all * LN2;
                dst[1] = l_all;
            }
        }
    }
}

#define DECODE_KERNEL(HD, GM)                                                                 \
    extern "C" __global__ void __launch_bounds__(DECODE_WARPS * 32)                          \
        attention_decode_##HD##_##GM(                                                         \
            const float* q, const unsigned short* k_cache, const unsigned short* v_cache,     \
            const unsigned int* positions, const unsigned int* table_starts,                  \
            const unsigned int* tables, float* out, float* partial, unsigned int n_head,      \
            unsigned int n_head_kv, unsigned int window, unsigned int block_shift,            \
            float scale, unsigned int chunk) {                                                \
        attention_decode<HD, GM>(q, k_cache, v_cache, positions, table_starts, tables, out,  \
                                 partial, n_head, n_head_kv, window, block_shift, scale,      \
                                 chunk);                                                      \
    }

DECODE_KERNEL(64, 1)
DECODE_KERNEL(64, 2)
DECODE_KERNEL(64, 4)
DECODE_KERNEL(64, 8)
DECODE_KERNEL(128, 1)
DECODE_KERNEL(128, 2)
DECODE_KERNEL(128, 4)
DECODE_KERNEL(128, 8)
DECODE_KERNEL(256, 1)
DECODE_KERNEL(256, 2)
DECODE_KERNEL(256, 4)
DECODE_KERNEL(256, 8)
