// Causal attention of prompts over the paged f16 KV cache on tensor cores, flash-attention
// style: the queries of a tile share every key and value tile that they load.
//
// One block of PREFILL_WARPS warps per (query head, tile of PREFILL_ROWS consecutive tokens),
// each warp 16 of the tokens. The block walks the keys its tokens see in tiles of BN
// positions, each copied into shared memory (two buffers: the next tile is in flight while
// this one is used), gathered from the cache through the block table. Scores S = Q·Kᵀ and
// the output O += P·V are m16n8k16 f16 products with f32 sums; S's fragments become P's
// without leaving registers. The softmax is online, in base 2 (the queries are scaled by
// log2(e)), each row's running max and sum kept by the 4 lanes that hold the row.
//
// The tokens of a tile normally belong to one sequence. Where a tile holds the end of one
// sequence's tokens and the start of another's (several prompts in one pass), it takes each
// run of tokens of one sequence (one block table) in turn, the others masked; the host sends
// passes whose runs are short (decoding: one token per sequence) to the flash-decoding
// kernel instead. The keys are not split across blocks: a pass of few tokens over a long
// context gets only (heads × tiles) blocks.
//
// Position p of a token's sequence lives in slot
// (tables[table_start + (p >> block_shift)] << block_shift) | (p & block_mask).

#define PREFILL_WARPS 4
#define PREFILL_ROWS (PREFILL_WARPS * 16)
// NVRTC has no math.h to define INFINITY.
#define NEG_INF __int_as_float(0xff800000)
#define LOG2E 1.4426950408889634f

template <int HD>
__device__ __forceinline__ void attention_prefill(
    const float* q, const unsigned short* k_cache, const unsigned short* v_cache,
    const unsigned int* positions, const unsigned int* table_starts, const unsigned int* tables,
    float* out, unsigned int n_tokens, unsigned int n_head, unsigned int n_head_kv,
    unsigned int window, unsigned int block_shift, float scale) {
    // Key positions per tile: two buffers of K and V tiles stay within 48 KB.
    constexpr int BN = HD <= 64 ? 64 : 32;
    // Rows padded by 16 bytes, so that the 8 rows that ldmatrix reads at once fall in
    // different banks.
    constexpr int STRIDE = HD + 8;
    constexpr int KT = HD / 16;  // k-steps of Q·Kᵀ
    constexpr int NT = BN / 8;   // key columns of S, 8 at a time
    constexpr int DT = HD / 8;   // output columns, 8 at a time
    __shared__ __align__(16) unsigned short ks[2][BN][STRIDE];
    __shared__ __align__(16) unsigned short vs[2][BN][STRIDE];
    __shared__ unsigned int row_start[PREFILL_ROWS], row_pos[PREFILL_ROWS];
    __shared__ unsigned int row_table[PREFILL_ROWS];

    const unsigned int h = blockIdx.x;
    // The last tiles see the most keys: they start first.
    const unsigned int row0 = (gridDim.y - 1 - blockIdx.y) * PREFILL_ROWS;
    const unsigned int rows = min((unsigned int)PREFILL_ROWS, n_tokens - row0);
    const unsigned int kv_head = h / (n_head / n_head_kv);
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const unsigned int g = lane / 4, c = lane % 4;
    // ldmatrix: lane l gives the address of row l % 8 of matrix l / 8.
    const unsigned int mat = lane / 8, mat_row = lane % 8;
    const unsigned int width = n_head_kv * HD;
    const unsigned int block_mask = (1u << block_shift) - 1;

    if (threadIdx.x < rows) {
        const unsigned int pos = positions[row0 + threadIdx.x];
        row_pos[threadIdx.x] = pos;
        row_start[threadIdx.x] = first_visible(pos, window);
        row_table[threadIdx.x] = table_starts[row0 + threadIdx.x];
    }

    // The warp's 16 query rows as A fragments; rows past the pass's tokens are zeros.
    unsigned int qa[KT][4];
    const float qs = scale * LOG2E;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const unsigned int r = warp * 16 + g + 8 * half;
        const float* qr = q + ((unsigned long long)(row0 + r) * n_head + h) * HD + 2 * c;
#pragma unroll
        for (int kk = 0; kk < KT; kk++) {
            float2 a = make_float2(0.0f, 0.0f), b = make_float2(0.0f, 0.0f);
            if (r < rows) {
                a = *reinterpret_cast<const float2*>(qr + kk * 16);
                b = *reinterpret_cast<const float2*>(qr + kk * 16 + 8);
            }
            qa[kk][half] = pack_half2(a.x * qs, a.y * qs);
            qa[kk][2 + half] = pack_half2(b.x * qs, b.y * qs);
        }
    }
    __syncthreads();

    for (unsigned int seg = 0; seg < rows;) {
        // The run of rows from `seg` that share a block table, and the keys they see.
        const unsigned int table_start = row_table[seg];
        unsigned int seg_end = seg + 1;
        while (seg_end < rows && row_table[seg_end] == table_start) seg_end++;
        unsigned int lo = 0xffffffffu, hi = 0;
        for (unsigned int r = seg; r < seg_end; r++) {
            lo = min(lo, row_start[r]);
            hi = max(hi, row_pos[r] + 1);
        }
        const unsigned int* table = tables + table_start;

        // This lane's two rows see keys [r_lo, r_hi); rows outside the run see none.
        unsigned int r_lo[2], r_hi[2];
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const unsigned int r = warp * 16 + g + 8 * half;
            const bool in = r >= seg && r < seg_end;
            r_lo[half] = in ? row_start[r] : 1;
            r_hi[half] = in ? row_pos[r] + 1 : 0;
        }

        // Key tile `it` into buffer `b`; positions past `hi` repeat the last row (masked).
        auto load_tile = [&](unsigned int it, int b) {
            const unsigned int kb = lo + it * BN;
            for (unsigned int i = threadIdx.x; i < BN * HD / 8; i += blockDim.x) {
                const unsigned int r = i / (HD / 8), col = i % (HD / 8);
                const unsigned int j = min(kb + r, hi - 1);
                const unsigned long long slot =
                    ((unsigned long long)table[j >> block_shift] << block_shift) |
                    (j & block_mask);
                const unsigned long long at = slot * width + kv_head * HD + col * 8;
                copy_async_16(&ks[b][r][col * 8], k_cache + at);
                copy_async_16(&vs[b][r][col * 8], v_cache + at);
            }
            copy_async_commit();
        };

        float o[DT][4], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

        const unsigned int n_tiles = (hi - lo + BN - 1) / BN;
        load_tile(0, 0);
        for (unsigned int it = 0; it < n_tiles; it++) {
            if (it + 1 < n_tiles) {
                load_tile(it + 1, (it + 1) & 1);
                copy_async_wait<1>();
            } else {
                copy_async_wait<0>();
            }
            __syncthreads();
            const int b = it & 1;
            const unsigned int kb = lo + it * BN;

            float sc[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KT; kk++) {
#pragma unroll
                for (int nt = 0; nt < NT; nt += 2) {
                    // Matrices: keys nt·8.. × dims kk·16.., then dims + 8, then keys + 8.
                    unsigned int kf[4];
                    load_matrix_x4(kf, &ks[b][(nt + (mat >> 1)) * 8 + mat_row][kk * 16 + (mat & 1) * 8]);
                    mma_16x8x16(sc[nt], qa[kk], kf);
                    mma_16x8x16(sc[nt + 1], qa[kk], kf + 2);
                }
            }

#pragma unroll
            for (int half = 0; half < 2; half++) {
                float mx = NEG_INF;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const unsigned int j = kb + nt * 8 + 2 * c + e;
                        float& s = sc[nt][2 * half + e];
                        if (j < r_lo[half] || j >= r_hi[half]) s = NEG_INF;
                        mx = fmaxf(mx, s);
                    }
                }
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float m_new = fmaxf(m[half], mx);
                // A row that has seen no key yet keeps zeros.
                const float m_use = m_new == NEG_INF ? 0.0f : m_new;
                const float corr = exp2f(m[half] - m_use);
                m[half] = m_new;
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        float& s = sc[nt][2 * half + e];
                        s = exp2f(s - m_use);
                        sum += s;
                    }
                }
                l[half] = l[half] * corr + sum;
#pragma unroll
                for (int dt = 0; dt < DT; dt++) {
                    o[dt][2 * half] *= corr;
                    o[dt][2 * half + 1] *= corr;
                }
            }

#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) {
                // P's 16 × 16 block of keys kk·16.. as an A fragment: S's tiles 2kk, 2kk + 1.
                const unsigned int pa[4] = {
                    pack_half2(sc[2 * kk][0], sc[2 * kk][1]),
                    pack_half2(sc[2 * kk][2], sc[2 * kk][3]),
                    pack_half2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                    pack_half2(sc[2 * kk + 1][2], sc[2 * kk + 1][3]),
                };
#pragma unroll
                for (int dt = 0; dt < DT; dt += 2) {
                    // Matrices, transposed: keys kk·16.. × dims dt·8.., then keys + 8, then
                    // dims + 8.
                    unsigned int vf[4];
                    load_matrix_x4_trans(vf, &vs[b][kk * 16 + (mat & 1) * 8 + mat_row][(dt + (mat >> 1)) * 8]);
                    mma_16x8x16(o[dt], pa, vf);
                    mma_16x8x16(o[dt + 1], pa, vf + 2);
                }
            }
            // Every warp is done with buffer b before the next tile but one is copied into it.
            __syncthreads();
        }

#pragma unroll
        for (int half = 0; half < 2; half++) {
            float sum = l[half];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const unsigned int r = warp * 16 + g + 8 * half;
            if (r >= seg && r < seg_end) {
                // The row's own position is among its keys, so sum > 0.
                const float inv = 1.0f / sum;
                float* dst = out + ((unsigned long long)(row0 + r) * n_head + h) * HD + 2 * c;
#pragma unroll
                for (int dt = 0; dt < DT; dt++) {
                    *reinterpret_cast<float2*>(dst + dt * 8) =
                        make_float2(o[dt][2 * half] * inv, o[dt][2 * half + 1] * inv);
                }
            }
        }
        seg = seg_end;
    }
}

#define PREFILL_KERNEL(HD)                                                                    \
    extern "C" __global__ void __launch_bounds__(PREFILL_WARPS * 32) attention_prefill_##HD( \
        const float* q, const unsigned short* k_cache, const unsigned short* v_cache,         \
        const unsigned int* positions, const unsigned int* table_starts,                      \
        const unsigned int* tables, float* out, unsigned int n_tokens, unsigned int n_head,   \
        unsigned int n_head_kv, unsigned int window, unsigned int block_shift, float scale) { \
        attention_prefill<HD>(q, k_cache, v_cache, positions, table_starts, tables, out,     \
                              n_tokens, n_head, n_head_kv, window, block_shift, scale);       \
    }

PREFILL_KERNEL(64)
PREFILL_KERNEL(128)
