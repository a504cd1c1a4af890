// (After blocks.cuh and matmul.cu, whose weight loads it shares.) Matrix-vector products with
// 8-bit activations: y[n × m] = x[n × k] · Wᵀ for n ≤ 8, as llama.cpp's mmvq; and for batched
// decoding, the same products on groups of 8 activation rows with more weight rows per warp.
//
// quantize_q8 turns each activation row into blocks of 32 int8 values with a scale d and the
// sum of the values the block stands for, d Σ q (q = round(x / d), d = max |x| / 127). The products
// then take four weight-activation pairs per dp4a instruction instead of a float conversion
// and an FMA per weight: the f32 kernels of matmul.cu issue about as many instructions per
// weight byte as DRAM delivers bytes, so they cannot reach its bandwidth.
//
// Outliers, as in the cpu backend (crates/backend-cpu/src/outliers.rs): a value whose magnitude
// exceeds `factor` times its row's mean magnitude would make its block's step so coarse that
// every other value in the block rounds to zero. Such values are zeroed before quantizing and
// listed per row ([count, column, value bits, column, value bits, ...]); the products add
// W[row][column] · value for each in f32, from the weight dequantized as dequant.cu does. With
// factor × mean over the threshold, a row of k values has fewer than k / factor of them.
//
// The chunking of a row among lanes and the R rows per warp are those of matmul.cu's kernel;
// each type's struct derives from matmul.cu's for its loads.

__device__ __forceinline__ int dp4a(int a, int b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__device__ __forceinline__ int4 ldq16(const signed char* p) { return __ldg((const int4*)p); }
__device__ __forceinline__ int2 ldq8(const signed char* p) { return __ldg((const int2*)p); }

// Bytes 0..63 of v, each minus 32, as signed bytes: with bit 7 set no byte borrows from the next.
__device__ __forceinline__ int minus32(u32 v) {
    return (int)(((v | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
}

#define LO4 0x0F0F0F0Fu
// Chunks each lane loads ahead of their use, unless a type sets its own. ncu of a 7B Q4_K_M decode
// step: Q4_K 9.6 µs a product with two, 12.0 with one; Q6_K 19.4 with two, 15.1 with one (then
// GGUF's 210-byte blocks, which took 13 loads a chunk); four were slower for all (206.7 against
// 245.5 tokens/s). Q6_K's aligned blocks (5 loads a chunk) keep one: its single-row V and
// ffn_down products took 7.8 and 17.7 µs with one, 10.8 and 25.6 with two (7B tg128 442 against
// 413 tokens/s; docs/benchmarks.md, "Q6_K weights 16-byte aligned").
#define UQ 2
#define UQ_Q4_0 UQ
#define UQ_Q4_1 UQ
#define UQ_Q5_0 UQ
#define UQ_Q8_0 UQ
#define UQ_Q4_K UQ
#define UQ_Q5_K UQ
#define UQ_Q6_K 1
#define UQ_Q8_0_BLOCKS UQ

// ------------------------------------------------------------------------ activation quantizer

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
    return v;
}

// Row blockIdx.y of x (k values, k a multiple of 32), values QUANTIZE_VALUES · blockIdx.x on:
// their int8 values into qs (k per row), the (d, sum) of each block of 32 into ds (k / 32 per
// row). Block 0 of a row also lists the row's outliers (1 + 2 cap words per row). The steps are
// quantize_q8.cuh's, which the kernels that quantize the rows they write also take.
//
// Every block of a row first sums and maximizes the whole row's magnitudes itself (from L2: a
// few float4 loads per thread); one block per row quantized a 4096-value row on one SM in
// 7.2 µs, and blocks of 1024 values in 3.7 µs.
extern "C" __global__ void __launch_bounds__(QUANTIZE_THREADS)
    quantize_q8(const float* __restrict__ x, int k, float factor, signed char* __restrict__ qs,
                float2* __restrict__ ds, u32* __restrict__ outliers, int cap) {
    start_dependents();
    wait_for_producers();
    const float* xr = x + (long long)blockIdx.y * k;
    __shared__ u32 count;
    if (threadIdx.x == 0) count = 0;
    float sum = 0.0f, peak = 0.0f;
    float4 v[Q8_BATCH];
    q8_batched_chunks(
        k, [&](int j, int i) { v[j] = __ldg((const float4*)(xr + i)); },
        [&](int j, int) { q8_add(v[j], sum, peak); });
    const Q8Rows q = {qs, ds, outliers, cap, factor};
    q8_finish(sum, peak, xr + QUANTIZE_VALUES * blockIdx.x, [&](int i) { return xr[i]; }, k, q,
              &count);
}

// -------------------------------------------------------------------------------- weight types
// dot<N, R>(raw, xq, xd, k, c, acc) adds chunk c of R rows times the n activation rows: xq holds
// k int8 values per row, xd the (d, sum) of each of its blocks of 32.

// One chunk per block. Σ (q − 8)·x̃ = d_x Σ q·q_x − 8 Σ x̃.
struct Q4_0_Q8 : Q4_0 {
    using Deq = deq::Q4_0;
    static constexpr int AHEAD = UQ_Q4_0;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int4 xl = ldq16(xq + (size_t)j * k + 32 * c);
            const int4 xh = ldq16(xq + (size_t)j * k + 32 * c + 16);
            const float2 s = xd[(size_t)j * (k / 32) + c];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32* q = raw[r].q;
                int i = dp4a(q[0] & LO4, xl.x, 0);
                i = dp4a(q[1] & LO4, xl.y, i);
                i = dp4a(q[2] & LO4, xl.z, i);
                i = dp4a(q[3] & LO4, xl.w, i);
                i = dp4a((q[0] >> 4) & LO4, xh.x, i);
                i = dp4a((q[1] >> 4) & LO4, xh.y, i);
                i = dp4a((q[2] >> 4) & LO4, xh.z, i);
                i = dp4a((q[3] >> 4) & LO4, xh.w, i);
                const float d = h2f((unsigned short)raw[r].d);
                acc[r][j] = __fmaf_rn(d, __fmaf_rn(s.x, (float)i, -8.0f * s.y), acc[r][j]);
            }
        }
    }
};

// Σ (d q + m)·x̃ = d d_x Σ q·q_x + m Σ x̃.
struct Q4_1_Q8 : Q4_1 {
    using Deq = deq::Q4_1;
    static constexpr int AHEAD = UQ_Q4_1;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int4 xl = ldq16(xq + (size_t)j * k + 32 * c);
            const int4 xh = ldq16(xq + (size_t)j * k + 32 * c + 16);
            const float2 s = xd[(size_t)j * (k / 32) + c];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32* q = raw[r].q;
                int i = dp4a(q[0] & LO4, xl.x, 0);
                i = dp4a(q[1] & LO4, xl.y, i);
                i = dp4a(q[2] & LO4, xl.z, i);
                i = dp4a(q[3] & LO4, xl.w, i);
                i = dp4a((q[0] >> 4) & LO4, xh.x, i);
                i = dp4a((q[1] >> 4) & LO4, xh.y, i);
                i = dp4a((q[2] >> 4) & LO4, xh.z, i);
                i = dp4a((q[3] >> 4) & LO4, xh.w, i);
                const float2 dm = h2f2(raw[r].dm);
                acc[r][j] = __fmaf_rn(dm.x * s.x, (float)i, __fmaf_rn(dm.y, s.y, acc[r][j]));
            }
        }
    }
};

// Σ (q − 16)·x, the fifth bits spread into the bytes.
struct Q5_0_Q8 : Q5_0 {
    using Deq = deq::Q5_0;
    static constexpr int AHEAD = UQ_Q5_0;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
        int lo[R][4], hi[R][4];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < 4; t++) {
                const u32 w = raw[r].q[t];
                lo[r][t] = (int)((w & LO4) | spread4(raw[r].qh >> (4 * t)));
                hi[r][t] = (int)(((w >> 4) & LO4) | spread4(raw[r].qh >> (16 + 4 * t)));
            }
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int4 xl = ldq16(xq + (size_t)j * k + 32 * c);
            const int4 xh = ldq16(xq + (size_t)j * k + 32 * c + 16);
            const float2 s = xd[(size_t)j * (k / 32) + c];
#pragma unroll
            for (int r = 0; r < R; r++) {
                int i = dp4a(lo[r][0], xl.x, 0);
                i = dp4a(lo[r][1], xl.y, i);
                i = dp4a(lo[r][2], xl.z, i);
                i = dp4a(lo[r][3], xl.w, i);
                i = dp4a(hi[r][0], xh.x, i);
                i = dp4a(hi[r][1], xh.y, i);
                i = dp4a(hi[r][2], xh.z, i);
                i = dp4a(hi[r][3], xh.w, i);
                const float d = h2f((unsigned short)raw[r].d);
                acc[r][j] = __fmaf_rn(d, __fmaf_rn(s.x, (float)i, -16.0f * s.y), acc[r][j]);
            }
        }
    }
};

// A chunk is a quarter block: 8 signed bytes.
struct Q8_0_Q8 : Q8_0 {
    using Deq = deq::Q8_0;
    static constexpr int AHEAD = UQ_Q8_0;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int2 x = ldq8(xq + (size_t)j * k + 8 * c);
            const float dx = xd[(size_t)j * (k / 32) + (c >> 2)].x;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = dp4a((int)raw[r].q[1], x.y, dp4a((int)raw[r].q[0], x.x, 0));
                acc[r][j] = __fmaf_rn(h2f((unsigned short)raw[r].d) * dx, (float)i, acc[r][j]);
            }
        }
    }
};

// The mat-vec kernels' Q8_0 (1 to 8 activation rows): a chunk is a whole block, so that its scale
// and its activation block's are loaded once per 32 weights instead of once per 8 as in Q8_0_Q8,
// and its 8 words of 2-byte aligned quants take 9 loads instead of 12. 7B Q8_0 tg128: 209
// tokens/s with Q8_0_Q8's quarter blocks, 272 with half blocks, 289 with whole ones (the same
// with one chunk ahead). Every row count takes the same layout, so that a row sums in the same
// order however many rows share the launch: decoding in batches of 2 to 8 then equals decoding
// token by token to the bit (with quarter blocks for 2 to 8 rows, gemma3-270m's logits parted
// by 2e-2 relative RMS, rounding flips in the next 8-bit quantizations).
struct Q8_0_Q8_Blocks : Q8_0_Q8 {
    static constexpr int CH = 32;
    static constexpr int AHEAD = UQ_Q8_0_BLOCKS;
    struct Raw { u32 d, q[8]; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + c * BB;
        Raw r;
        r.d = ld16(b);
        ld_a2<8>(b + 2, r.q);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const int4 xl = ldq16(xq + (size_t)j * k + 32 * c);
            const int4 xh = ldq16(xq + (size_t)j * k + 32 * c + 16);
            const float dx = xd[(size_t)j * (k / 32) + c].x;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32* q = raw[r].q;
                int i = dp4a((int)q[0], xl.x, 0);
                i = dp4a((int)q[1], xl.y, i);
                i = dp4a((int)q[2], xl.z, i);
                i = dp4a((int)q[3], xl.w, i);
                i = dp4a((int)q[4], xh.x, i);
                i = dp4a((int)q[5], xh.y, i);
                i = dp4a((int)q[6], xh.z, i);
                i = dp4a((int)q[7], xh.w, i);
                acc[r][j] = __fmaf_rn(h2f((unsigned short)raw[r].d) * dx, (float)i, acc[r][j]);
            }
        }
    }
};

// Chunk c: 16 bytes of qs, the low nibbles elements e .. e + 16 of sub-block 2p (activation
// block b), the high ones e + 32 .. e + 48 of sub-block 2p + 1 (block b + 1). The two chunks of a
// pair share those blocks; the even one subtracts the mins times the blocks' whole sums.
// Σ (d sc q − dmin mn)·x̃ = d sc d_x Σ q·q_x − dmin mn Σ x̃.
template <bool FIFTH_BIT>
__device__ __forceinline__ void dot_q45_k(const uint4 head, const uint4 q, const uint4 qh,
                                          int c, int (&lo)[4], int (&hi)[4], float& dl,
                                          float& dh, float& ml, float& mh) {
    const int p = (c & 7) >> 1;
    const float2 dm = h2f2(head.x);
    u32 sc, mn;
    scale_min_k4(2 * p, head.y, head.z, head.w, sc, mn);
    dl = dm.x * (float)sc;
    ml = dm.y * (float)mn;
    scale_min_k4(2 * p + 1, head.y, head.z, head.w, sc, mn);
    dh = dm.x * (float)sc;
    mh = dm.y * (float)mn;
    const u32 w[4] = {q.x, q.y, q.z, q.w};
    const u32 h[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
    for (int t = 0; t < 4; t++) {
        lo[t] = (int)(w[t] & LO4);
        hi[t] = (int)((w[t] >> 4) & LO4);
        if (FIFTH_BIT) {
            lo[t] |= (int)(((h[t] >> (2 * p)) & 0x01010101u) << 4);
            hi[t] |= (int)(((h[t] >> (2 * p + 1)) & 0x01010101u) << 4);
        }
    }
}

template <int N, int R>
__device__ __forceinline__ void dot_k_pairs(const int (&lo)[R][4], const int (&hi)[R][4],
                                            const float (&dl)[R], const float (&dh)[R],
                                            const float (&ml)[R], const float (&mh)[R],
                                            const signed char* xq, const float2* xd, int k,
                                            int c, float (&acc)[R][N]) {
    const int p = (c & 7) >> 1;
    const int e = (c >> 3) * 256 + 64 * p + 16 * (c & 1);
    const int b = e >> 5;
    const bool mins = (c & 1) == 0;
#pragma unroll
    for (int j = 0; j < N; j++) {
        const int4 xl = ldq16(xq + (size_t)j * k + e);
        const int4 xh = ldq16(xq + (size_t)j * k + e + 32);
        const float2 sl = xd[(size_t)j * (k / 32) + b];
        const float2 sh = xd[(size_t)j * (k / 32) + b + 1];
#pragma unroll
        for (int r = 0; r < R; r++) {
            int il = dp4a(lo[r][0], xl.x, 0);
            il = dp4a(lo[r][1], xl.y, il);
            il = dp4a(lo[r][2], xl.z, il);
            il = dp4a(lo[r][3], xl.w, il);
            int ih = dp4a(hi[r][0], xh.x, 0);
            ih = dp4a(hi[r][1], xh.y, ih);
            ih = dp4a(hi[r][2], xh.z, ih);
            ih = dp4a(hi[r][3], xh.w, ih);
            float a = __fmaf_rn(dl[r] * sl.x, (float)il, acc[r][j]);
            a = __fmaf_rn(dh[r] * sh.x, (float)ih, a);
            if (mins) a = __fmaf_rn(-ml[r], sl.y, __fmaf_rn(-mh[r], sh.y, a));
            acc[r][j] = a;
        }
    }
}

struct Q4_K_Q8 : Q4_K {
    using Deq = deq::Q4_K;
    static constexpr int AHEAD = UQ_Q4_K;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
        int lo[R][4], hi[R][4];
        float dl[R], dh[R], ml[R], mh[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            dot_q45_k<false>(raw[r].head, raw[r].q, raw[r].q, c, lo[r], hi[r], dl[r], dh[r],
                             ml[r], mh[r]);
        dot_k_pairs<N, R>(lo, hi, dl, dh, ml, mh, xq, xd, k, c, acc);
    }
};

struct Q5_K_Q8 : Q5_K {
    using Deq = deq::Q5_K;
    static constexpr int AHEAD = UQ_Q5_K;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
        int lo[R][4], hi[R][4];
        float dl[R], dh[R], ml[R], mh[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            dot_q45_k<true>(raw[r].head, raw[r].q, raw[r].qh, c, lo[r], hi[r], dl[r], dh[r],
                            ml[r], mh[r]);
        dot_k_pairs<N, R>(lo, hi, dl, dh, ml, mh, xq, xd, k, c, acc);
    }
};

// Chunk c: half h, elements e + 32s .. e + 32s + 8 for s in 0..4 (activation block
// 8 (c / 8) + 4h + s, at offset l0), each group of 8 under one scale.
struct Q6_K_Q8 : Q6_K {
    using Deq = deq::Q6_K;
    static constexpr int AHEAD = UQ_Q6_K;
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const signed char* xq, const float2* xd,
                               int k, int c, float (&acc)[R][N]) {
        const int e = (c >> 3) * 256 + 128 * ((c >> 2) & 1) + 8 * (c & 3);
        const int half16 = (c & 3) >> 1;  // l0 / 16: which of the two scales of a 32-run
        float d[R];
#pragma unroll
        for (int r = 0; r < R; r++) d[r] = h2f((unsigned short)raw[r].d);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            int q[R][2], sc[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                sc[r] = (int)(signed char)((raw[r].sc[s >> 1] >> (16 * (s & 1) + 8 * half16)) & 0xFF);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const u32 ql = s & 1 ? raw[r].b[i] : raw[r].a[i];
                    const u32 lo4 = s < 2 ? ql & LO4 : (ql >> 4) & LO4;
                    const u32 hi2 = s == 0 ? raw[r].h[i] << 4 : s == 1 ? raw[r].h[i] << 2
                                  : s == 2 ? raw[r].h[i] : raw[r].h[i] >> 2;
                    q[r][i] = minus32(lo4 | (hi2 & 0x30303030u));
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const int2 x = ldq8(xq + (size_t)j * k + e + 32 * s);
                const float dx = xd[(size_t)j * (k / 32) + ((e + 32 * s) >> 5)].x;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const int i = dp4a(q[r][1], x.y, dp4a(q[r][0], x.x, 0));
                    acc[r][j] = __fmaf_rn(d[r] * dx, (float)(i * sc[r]), acc[r][j]);
                }
            }
        }
    }
};

// ---------------------------------------------------------------------------------- the kernel

// Element `col` of `row`, dequantized as dequant.cu does.
template <class D>
__device__ float weight_at(const Row& row, int col) {
    float y[D::P];
    D::deq(row.from_block(col / D::BE, D::BB), (col % D::BE) / D::P, y);
    return y[col % D::P];
}

// Up to MAX_PRODUCTS products of one weight type with the same activations (Q, K and V; gate
// and up), in one launch: product p takes the blocks of the grid's x dimension from
// first_block[p] to the next product's first block, so that the launch's ramp and tail are paid
// once for all of them. Past the products in use, first_block holds the grid's block count. The
// host's struct (`Products` in matmul.rs) has this layout. 7B Q4_K_M tg128: 300.9 tokens/s with a
// launch per product, 321.0 with Q, K (and V where it has their type) in one and gate and up in
// one; TinyLlama 801 against 870 – 884.
#define MAX_PRODUCTS 3
struct Products {
    const u8* w[MAX_PRODUCTS];
    float* y[MAX_PRODUCTS];
    int m[MAX_PRODUCTS];
    int first_block[MAX_PRODUCTS];
};

// The product that block b of a launch over `ps` takes: its weight, output, rows and first
// block, chosen with constant indices (a computed index into the parameter arrays would copy
// them to local memory).
struct Product {
    const u8* w;
    float* y;
    int m, first;
};
__device__ __forceinline__ Product product_of_block(const Products& ps, int b) {
    const int p = b >= ps.first_block[2] ? 2 : b >= ps.first_block[1] ? 1 : 0;
    return Product{p == 2 ? ps.w[2] : p == 1 ? ps.w[1] : ps.w[0],
                   p == 2 ? ps.y[2] : p == 1 ? ps.y[1] : ps.y[0],
                   p == 2 ? ps.m[2] : p == 1 ? ps.m[1] : ps.m[0],
                   p == 2 ? ps.first_block[2] : p == 1 ? ps.first_block[1] : 0};
}

// Chunks c, c + 32, ... (AHEAD of them, those below `chunks`) of each of the R rows.
template <class T, int R, int AHEAD>
__device__ __forceinline__ void load_chunks(typename T::Raw (&raw)[AHEAD][R],
                                            const Row (&rows)[R], int c, int chunks) {
#pragma unroll
    for (int u = 0; u < AHEAD; u++)
        if (c + 32 * u < chunks)
#pragma unroll
            for (int r = 0; r < R; r++) raw[u][r] = T::load(rows[r], c + 32 * u);
}

// R weight rows per warp times N activation rows: those of group `group` (rows N · group on).
// AHEAD chunks per lane are loaded before their use.
template <class T, int N, int R, int AHEAD>
__device__ __forceinline__ void matvec_q8(const Products& ps,
                                          const signed char* __restrict__ xq,
                                          const float2* __restrict__ xd,
                                          const u32* __restrict__ outliers, int cap, int k,
                                          long long row_bytes, int group) {
    const int b = blockIdx.x;
    const Product product = product_of_block(ps, b);
    const u8* __restrict__ w = product.w;
    float* __restrict__ y = product.y;
    const int m = product.m, first = product.first;
    const int lane = threadIdx.x & 31;
    const int row0 = ((b - first) * WARPS + (threadIdx.x >> 5)) * R;
    Row rows[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        rows[r] = weight_row<T::BB>(w, max(min(row0 + r, m - 1), 0), m, row_bytes);
    const int chunks = k / T::CH;
    // A lane's first chunks are loaded before the wait: no kernel writes the weights, so with
    // programmatic dependent launch these loads overlap the kernel before this one.
    typename T::Raw lead[AHEAD][R];
    if (row0 < m) load_chunks<T, R, AHEAD>(lead, rows, lane, chunks);
    wait_for_producers();
    if (row0 >= m) return;
    xq += (long long)group * N * k;
    xd += (long long)group * N * (k / 32);
    outliers += (long long)group * N * (1 + 2 * cap);
    y += (long long)group * N * m;
    float acc[R][N] = {};
#pragma unroll
    for (int u = 0; u < AHEAD; u++)
        if (lane + 32 * u < chunks) T::template dot<N, R>(lead[u], xq, xd, k, lane + 32 * u, acc);
    for (int c = lane + 32 * AHEAD; c < chunks; c += 32 * AHEAD) {
        typename T::Raw raw[AHEAD][R];
        load_chunks<T, R, AHEAD>(raw, rows, c, chunks);
#pragma unroll
        for (int u = 0; u < AHEAD; u++)
            if (c + 32 * u < chunks) T::template dot<N, R>(raw[u], xq, xd, k, c + 32 * u, acc);
    }
    // The next kernel is let in only now, when this block's weights are read. Let in at the
    // start, the kernels after a product (its norm, then the next product, whose early loads
    // take DRAM from this one) ran ahead of it: 7B Q4_0 tg128 447 – 448 tokens/s, 471 – 472
    // with this (docs/benchmarks.md, fourth round).
    start_dependents();
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < N; j++) {
            float v = warp_sum(acc[r][j]);
            if (lane == (r * N + j) % 32 && row0 + r < m) {
                const u32* o = outliers + (long long)j * (1 + 2 * cap);
                for (u32 i = 0; i < o[0]; i++)
                    v = __fmaf_rn(weight_at<typename T::Deq>(rows[r], (int)o[1 + 2 * i]),
                                  __uint_as_float(o[2 + 2 * i]), v);
                y[(long long)j * m + row0 + r] = v;
            }
        }
}

#define MVQ(name, T, N, R, AHEAD)                                                              \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) mvq_##name##_##N(                 \
        const Products ps, const signed char* __restrict__ xq, const float2* __restrict__ xd, \
        const u32* __restrict__ outliers, int cap, int k, long long row_bytes) {               \
        matvec_q8<T, N, R, AHEAD>(ps, xq, xd, outliers, cap, k, row_bytes, 0);                 \
    }
// A single activation row (decoding one sequence) takes R1 weight rows a warp and A1 chunks
// ahead; where a type has a wide kernel (MVQ_WIDE), launches of many weight rows take that
// (`Q8Kernels::single_row` in matmul.rs chooses, and the grid is sized by its rows a warp).
// Neither changes the order in which a row sums its chunks, so one row gives the same bits
// whichever kernel multiplies it. One row a warp had twice the warps of ROWS, so twice the
// loads in flight, where a product of a few megabytes is bound by memory latency: 7B Q4_K_M
// tg128 with CUDA graphs 297.8 tokens/s with 2 rows a warp, 323.0 with 1. A sweep on an H200
// (7B tg128, tokens/s; the base is 1 row, 2 ahead, Q6_K 1 ahead; docs/benchmarks.md,
// 2026-11-29): Q4_K 365-368 base, 378 with 1 ahead, 349-357 with 2 or 4 rows, 344 with 4 ahead;
// Q6_K no variant better than its base. Q4_0 and Q8_0 were swept again once the mat-vecs loaded
// their first chunks before waiting for the kernel before them (docs/benchmarks.md, seventh
// round; tokens/s, TinyLlama and 7B): with 4 chunks ahead a lane loads its share of a 4096-wide
// row before that wait. Q4_0 with 2 rows and 1 ahead (the base then) 1,270 – 1,332 and 500 – 510,
// 1 row and 4 ahead 1,343 – 1,426 and 504 – 515, 2 rows and 4 ahead 1,321 – 1,353 and 520 – 526;
// Q8_0 with 2 rows and 2 ahead 1,173 – 1,247 and 382 – 389, 1 and 4 1,224 – 1,286 and 381 – 390,
// 2 and 4 1,201 – 1,237 and 388 – 392; 6 or 8 ahead were slower (Q8_0 7B 320 – 331). Two rows
// a warp from launches of 4096 rows on, one below (TinyLlama: gate and up two, the rest one; 7B:
// all two) took the best of both: Q4_0 1,452 – 1,455 and 515 – 521, Q8_0 1,223 – 1,247 and
// 389 – 392. From 6144 or 12288 rows on, always or never, TinyLlama Q4_0 ran 1,319 – 1,437
// and 7B Q8_0 378 – 388 where its launches changed; only TinyLlama Q8_0 gained (1,252 – 1,264
// from 12288 on).
#define MVQ_ALL(name, T, R1, A1)                                                                \
    MVQ(name, T, 1, R1, A1) MVQ(name, T, 2, ROWS, T::AHEAD) MVQ(name, T, 3, ROWS, T::AHEAD)  \
    MVQ(name, T, 4, ROWS, T::AHEAD) MVQ(name, T, 5, ROWS, T::AHEAD)                         \
    MVQ(name, T, 6, ROWS, T::AHEAD) MVQ(name, T, 7, ROWS, T::AHEAD)                         \
    MVQ(name, T, 8, ROWS, T::AHEAD)
// A single activation row with W weight rows a warp and A chunks ahead (`WIDE_ROWS_PER_WARP` in
// matmul.rs has the same W).
#define MVQ_WIDE(name, T, W, A)                                                                \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) mvq_##name##_1_wide(              \
        const Products ps, const signed char* __restrict__ xq, const float2* __restrict__ xd, \
        const u32* __restrict__ outliers, int cap, int k, long long row_bytes) {               \
        matvec_q8<T, 1, W, A>(ps, xq, xd, outliers, cap, k, row_bytes, 0);                     \
    }

// Batched decoding: the 8 activation rows of group blockIdx.y times BATCH_ROWS weight rows a
// warp, each chunk loaded just before its use, so that a warp's load of an activation chunk
// serves 4 weight rows instead of ROWS (2). 7B Q4_K_M, 16 sequences: 1,104 tokens/s with 2 rows a
// warp, 1,293 with 4, 1,074 with 8 (which has too many registers for more than one chunk).
#define BATCH_ROWS 4
#define MMQ(name, T)                                                                           \
    extern "C" __global__ void __launch_bounds__(32 * WARPS) mmq_##name(                       \
        const Products ps, const signed char* __restrict__ xq, const float2* __restrict__ xd, \
        const u32* __restrict__ outliers, int cap, int k, long long row_bytes) {               \
        matvec_q8<T, 8, BATCH_ROWS, 1>(ps, xq, xd, outliers, cap, k, row_bytes, blockIdx.y);   \
    }

MMQ(q4_0, Q4_0_Q8)
MMQ(q4_1, Q4_1_Q8)
MMQ(q5_0, Q5_0_Q8)
MMQ(q8_0, Q8_0_Q8)
MMQ(q4_k, Q4_K_Q8)
MMQ(q5_k, Q5_K_Q8)
MMQ(q6_k, Q6_K_Q8)

MVQ_ALL(q4_0, Q4_0_Q8, 1, 4)
MVQ_WIDE(q4_0, Q4_0_Q8, 2, 4)
MVQ_ALL(q4_1, Q4_1_Q8, 1, UQ_Q4_1)
MVQ_ALL(q5_0, Q5_0_Q8, 1, UQ_Q5_0)
MVQ_ALL(q8_0, Q8_0_Q8_Blocks, 1, 4)
MVQ_WIDE(q8_0, Q8_0_Q8_Blocks, 2, 4)
MVQ_ALL(q4_k, Q4_K_Q8, 1, 1)
MVQ_ALL(q5_k, Q5_K_Q8, 1, UQ_Q5_K)
MVQ_ALL(q6_k, Q6_K_Q8, 1, UQ_Q6_K)
