// (After mmq_tc.cu, whose block layout, slices and ending it shares.) Batched decoding of 17 – 64
// activation rows on the tensor cores with the weights dequantized to f16 in registers.
//
// mmq_tc.cu multiplies the weights' integer quants with the 8-bit rows in int8 and then scales
// each 32-value step's sum in f32, per weight row and activation row: five instructions for
// every value of a 16×8 tile of sums, for every tile of 8 activation rows. At 64 rows that is
// what bounds those kernels (ncu on 7B: 25 – 49% of the SMs busy, 6 – 11% of DRAM's peak;
// docs/benchmarks.md, 2026-11-29). Here a lane dequantizes its share of a weight tile once per
// step, scale and min included (Q4_K: d·sc·q − dmin·mn; Q6_K: d·sc·(q − 32), rounded once to
// f16), and that tile meets every tile of 8 activation rows in f16 products (mma m16n8k16, f32
// sums) that add straight into the accumulators. The activation rows are the same 8-bit rows as
// mmq_tc.cu's, each value q·d written as f16 by `q8_to_f16` once a launch (a row scaled by a power
// of two that keeps it in f16's range, undone after the products), and the rows' outliers are
// added in f32 after the products alike: so the sums are mmq_tc.cu's but for the f16 rounding of
// each weight and value (a relative 2^-11 at most each).
//
// The n rows are staged in shared memory by halves of a super-block (128 values), in a ring of
// three, so that a step waits at one barrier and its copies have two steps to arrive; the
// weights are loaded into registers straight from DRAM a super-block ahead, as in mmq_tc.cu.

#define F16_K 128                 // activation values per stage
#define F16_STRIDE (F16_K + 32)   // f16 values a staged row takes: rows 320 bytes apart put a
                                  // lane quad's 16-byte loads of two rows on different banks

// f16x2 arithmetic, as PTX (no cuda_fp16.h under NVRTC): a − b and a·b + c, rounded once.
__device__ __forceinline__ u32 hsub2(u32 a, u32 b) {
    u32 d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c) {
    u32 d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// Bytes 0 and 2 (even) or 1 and 3 (odd) of w as the f16 pair (1024 + byte): OR-ing a byte into
// the mantissa of 1024, whose step is 1, as matmul.cu does with floats.
#define F16_1024 0x64006400u
__device__ __forceinline__ u32 even_bytes_f16(u32 w) { return __byte_perm(w, F16_1024, 0x5250); }
__device__ __forceinline__ u32 odd_bytes_f16(u32 w) { return __byte_perm(w, F16_1024, 0x5351); }

// The 8-bit rows as f16: each value q·d (its block's scale d) times 2^-e, e the row's power of
// two that puts 127 times its largest d in [2^14, 2^15), so that no value exceeds f16's range
// and small rows keep their bits; factors[row] = 2^e undoes it after the products. Every 4
// values v0 .. v3 are stored as v0, v2, v1, v3 (see weight_fragments); piece p of 8 values (an
// 8-byte word of qs) becomes 16 bytes of halves. Grid (rows, pieces / Q8_TO_F16_THREADS): each
// block finds its row's e itself (k / 32 scales) and converts a piece a thread.
#define Q8_TO_F16_THREADS 256
extern "C" __global__ void __launch_bounds__(Q8_TO_F16_THREADS)
    q8_to_f16(const uint2* __restrict__ qs, const float2* __restrict__ ds,
              uint4* __restrict__ halves, float* __restrict__ factors, int k) {
    start_dependents();
    wait_for_producers();
    const long long row = blockIdx.x;
    const float2* d = ds + row * (k / 32);
    float peak = 0.0f;
    for (int i = threadIdx.x; i < k / 32; i += Q8_TO_F16_THREADS) peak = fmaxf(peak, fabsf(d[i].x));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) peak = fmaxf(peak, __shfl_xor_sync(0xffffffffu, peak, o));
    __shared__ float peaks[Q8_TO_F16_THREADS / 32];
    if ((threadIdx.x & 31) == 0) peaks[threadIdx.x >> 5] = peak;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < Q8_TO_F16_THREADS / 32; w++) peak = fmaxf(peak, peaks[w]);
    const int e = min(max(((__float_as_int(127.0f * peak) >> 23) & 0xFF) - 127 - 14, -100), 100);
    const float down = __int_as_float((127 - e) << 23);
    if (threadIdx.x == 0 && blockIdx.y == 0) factors[row] = __int_as_float((127 + e) << 23);
    const int p = blockIdx.y * Q8_TO_F16_THREADS + threadIdx.x;
    if (p >= k / 8) return;
    const uint2 v = qs[row * (k / 8) + p];
    const float s = d[p >> 2].x * down;
    float x[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[i] = (float)(signed char)(v.x >> (8 * i)) * s;
        x[4 + i] = (float)(signed char)(v.y >> (8 * i)) * s;
    }
    halves[row * (k / 8) + p] = make_uint4(pack_half2(x[0], x[2]), pack_half2(x[1], x[3]),
                                           pack_half2(x[4], x[6]), pack_half2(x[5], x[7]));
}

// The shared-memory stages: F16_STAGES of half a super-block each, n activation rows of F16_K
// f16 values, in a ring (`extern __shared__`: more than a block's static 48 KB).
#define F16_STAGES 3
template <int NT>
__device__ constexpr int f16_stage_halves() {
    return 8 * NT * F16_STRIDE;
}

// Copies half-super-block hs (values F16_K·hs ..) of the n rows into stage s.
__device__ __forceinline__ void stage_halves(unsigned short* s, const unsigned short* x16, int k,
                                             int n, int hs) {
    for (int i = threadIdx.x; i < n * (F16_K / 8); i += 32 * TC_WARPS) {
        const int row = i / (F16_K / 8), piece = i % (F16_K / 8);
        copy_async_16(s + row * F16_STRIDE + 8 * piece,
                      x16 + (long long)row * k + (long long)hs * F16_K + 8 * piece);
    }
}

// A lane's weight fragments of one 32-value block for two k16 products: a[u] holds rows g, g + 8
// at the lane's values 8c + 4u .. 8c + 4u + 3 of the block, as mma_16x8x16's a (v0, v2 in columns
// 2c, 2c + 1 and v1, v3 in 2c + 8, 2c + 9: the order that q8_to_f16 stores the activations in).
// words[u][i] holds row i's 4 values for product u, a byte each; (1024 + byte) − offset (an f16
// pair) is the value's quant, exactly, and the weight that quant times scale[i] plus add[i],
// rounded once.
__device__ __forceinline__ void weight_fragments(u32 (&a)[2][4], const u32 (&words)[2][2],
                                                 u32 offset, const u32 (&scale)[2],
                                                 const u32 (&add)[2]) {
#pragma unroll
    for (int u = 0; u < 2; u++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            a[u][i] = hfma2(hsub2(even_bytes_f16(words[u][i]), offset), scale[i], add[i]);
            a[u][2 + i] = hfma2(hsub2(odd_bytes_f16(words[u][i]), offset), scale[i], add[i]);
        }
}

// Adds block jj of stage s (its 32 values of every tile of 8 activation rows) times the weight
// fragments a to acc.
template <int NT>
__device__ __forceinline__ void block_products(const u32 (&a)[2][4], const unsigned short* s,
                                               int jj, int g, int c, float (&acc)[NT][4]) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const uint4 b = *(const uint4*)(s + (8 * t + g) * F16_STRIDE + 32 * jj + 8 * c);
        const u32 lo[2] = {b.x, b.y}, hi[2] = {b.z, b.w};
        mma_16x8x16(acc[t], a[0], lo);
        mma_16x8x16(acc[t], a[1], hi);
    }
}

// ------------------------------------------------------------------------------ weight types
// T::load(rows, sb, c) loads super-block sb of a lane's two weight rows (g and g + 8): bytes
// 8c .. 8c + 8 of each 32-value block; T::step<NT, HALF>(raw, stage, lane, acc) adds the products
// of blocks 4 HALF .. 4 HALF + 3 with the stage's activation rows.

// Q4_K (layout as in mmq_tc.cu): sub-block j's values 8c .. 8c + 8 are the low (j even) or high
// nibbles of bytes 8c .. 8c + 8 of pair j / 2.
struct Q4_K_F16 {
    using Deq = deq::Q4_K;
    static constexpr int BB = 144;
    using Raw = Q4_K_TC::Raw;
    static __device__ Raw load(const Row (&rows)[2], int sb, int c) {
        return Q4_K_TC::load(rows, sb, c);
    }
    template <int NT, int HALF>
    static __device__ void step(const Raw& raw, const unsigned short* s, int lane,
                                float (&acc)[NT][4]) {
        const int g = lane >> 2, c = lane & 3;
#pragma unroll
        for (int jj = 0; jj < 4; jj++) {
            const int j = 4 * HALF + jj, p = j >> 1, shift = 4 * (j & 1);
            u32 scale[2], add[2], words[2][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float2 dm = h2f2(raw.head[i].x);
                u32 sc, mn;
                scale_min_k4(j, raw.head[i].y, raw.head[i].z, raw.head[i].w, sc, mn);
                const float dl = dm.x * (float)sc, ml = -dm.y * (float)mn;
                scale[i] = pack_half2(dl, dl);
                add[i] = pack_half2(ml, ml);
                words[0][i] = (raw.q[i][p].x >> shift) & LO4;
                words[1][i] = (raw.q[i][p].y >> shift) & LO4;
            }
            u32 a[2][4];
            weight_fragments(a, words, F16_1024, scale, add);
            block_products<NT>(a, s, jj, g, c, acc);
        }
    }
};

// Q6_K (layout as in mmq_tc.cu): the values 8c .. 8c + 8 of 32-block j = 4h + s are the low
// (s < 2) or high nibbles of ql bytes 64h + 32(s % 2) + 8c .., with bits 2s of qh bytes 32h +
// 8c .. on top, less 32; all 8 take scale 8h + 2s + c / 2. (mmq_tc.cu's lanes take values 4c ..
// of each 16 instead, as its int8 products of one scale each need; here the scales are in the
// weights, and a lane's values are laid out as Q4_K's.)
struct Q6_K_F16 {
    using Deq = deq::Q6_K;
    static constexpr int BB = 208;
    struct Raw {
        uint2 ql[2][4];  // [row][2h + s % 2]
        uint2 qh[2][2];  // [row][h]
        uint4 sc[2];
        u32 d[2];
    };
    static __device__ Raw load(const Row (&rows)[2], int sb, int c) {
        Raw r;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const Row block = rows[i].from_block(sb, BB);
            const u8* a = block.q + 8 * c;
#pragma unroll
            for (int w = 0; w < 4; w++) r.ql[i][w] = ld64(a + 32 * w);
#pragma unroll
            for (int h = 0; h < 2; h++) r.qh[i][h] = ld64(a + 128 + 32 * h);
            r.sc[i] = ld128(block.q + 192);
            r.d[i] = ld16(block.d);
        }
        return r;
    }
    template <int NT, int HALF>
    static __device__ void step(const Raw& raw, const unsigned short* s, int lane,
                                float (&acc)[NT][4]) {
        const int g = lane >> 2, c = lane & 3;
        const u32 offset = 0x64206420u;  // 1056 = 1024 + 32, twice
        const u32 add[2] = {0, 0};
        // Blocks 4 HALF .. are h = HALF, s = 0 .. 3: scales 8h + 2s + c / 2, bytes 2s + c / 2
        // of the scales' words 2h (s < 2) and 2h + 1.
        const int scale_shift = 8 * (c >> 1);
#pragma unroll
        for (int sub = 0; sub < 4; sub++) {
            const int h = HALF;
            u32 scale[2], words[2][2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const u32 word = sub < 2 ? (h ? raw.sc[i].z : raw.sc[i].x)
                                         : (h ? raw.sc[i].w : raw.sc[i].y);
                const int sc = (signed char)(word >> (16 * (sub & 1) + scale_shift));
                const float dl = h2f((unsigned short)raw.d[i]) * (float)sc;
                scale[i] = pack_half2(dl, dl);
                const uint2 ql = raw.ql[i][2 * h + (sub & 1)], qh = raw.qh[i][h];
                const int lo_shift = sub < 2 ? 0 : 4;
                words[0][i] = ((ql.x >> lo_shift) & LO4) | (((qh.x >> (2 * sub)) & 0x03030303u) << 4);
                words[1][i] = ((ql.y >> lo_shift) & LO4) | (((qh.y >> (2 * sub)) & 0x03030303u) << 4);
            }
            u32 a[2][4];
            weight_fragments(a, words, offset, scale, add);
            block_products<NT>(a, s, sub, g, c, acc);
        }
    }
};

// ---------------------------------------------------------------------------------- the kernel

template <class T, int NT>
__device__ __forceinline__ void mmq_f16(const Products& ps, const unsigned short* __restrict__ x16,
                                        const float* __restrict__ factors,
                                        const u32* __restrict__ outliers, int cap, int k,
                                        long long row_bytes, int n, float4* __restrict__ partial,
                                        u32* __restrict__ counters) {
    const int b = blockIdx.x;
    const Product product = product_of_block(ps, b);
    const u8* __restrict__ w = product.w;
    const int m = product.m, first = product.first;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = (b - first) * TC_ROWS + 16 * warp + g;  // and row0 + 8
    const Row rows[2] = {weight_row<T::BB>(w, min(row0, m - 1), m, row_bytes),
                         weight_row<T::BB>(w, min(row0 + 8, m - 1), m, row_bytes)};
    const int slices = gridDim.y, slice = blockIdx.y, blocks = k / TC_K;
    const int sb0 = slice * blocks / slices, sb1 = (slice + 1) * blocks / slices;
    const int steps = 2 * (sb1 - sb0), h0 = 2 * sb0;  // half super-blocks

    // Step i reads stage i % F16_STAGES; the copies for step i + 2 go out after step i's
    // barrier, into the stage that step i − 1 read (every warp is past it then).
    extern __shared__ __align__(16) unsigned short stages[];
    __shared__ bool last;  // finish_tc's
    auto stage = [&](int i) { return stages + (i % F16_STAGES) * f16_stage_halves<NT>(); };
    start_dependents();
    typename T::Raw raw = T::load(rows, sb0, c);
    wait_for_producers();
    stage_halves(stage(0), x16, k, n, h0);
    copy_async_commit();
    stage_halves(stage(1), x16, k, n, h0 + 1);
    copy_async_commit();
    float acc[NT][4] = {};
    for (int i = 0; i < steps; i += 2) {
        const typename T::Raw next = i + 2 < steps ? T::load(rows, sb0 + i / 2 + 1, c) : raw;
        copy_async_wait<1>();
        __syncthreads();
        if (i + 2 < steps) stage_halves(stage(i + 2), x16, k, n, h0 + i + 2);
        copy_async_commit();
        T::template step<NT, 0>(raw, stage(i), lane, acc);
        copy_async_wait<1>();
        __syncthreads();
        if (i + 3 < steps) stage_halves(stage(i + 3), x16, k, n, h0 + i + 3);
        copy_async_commit();
        T::template step<NT, 1>(raw, stage(i + 1), lane, acc);
        raw = next;
    }

#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] *= factors[min(8 * t + 2 * c + (e & 1), n - 1)];
    finish_tc<T, NT>(acc, rows, row0, m, n, product.y, outliers, cap, partial, counters, last);
}

// mmq_f16_<type>_<NT>: up to 8 NT activation rows, for the tile counts that `TC_F16_TILES` in
// matmul.rs gives these kernels.
#define MMQ_F16(name, T, NT)                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * TC_WARPS, 3) mmq_f16_##name##_##NT(      \
        const Products ps, const unsigned short* __restrict__ x16,                             \
        const float* __restrict__ factors, const u32* __restrict__ outliers, int cap, int k,    \
        long long row_bytes, int n, float4* __restrict__ partial, u32* __restrict__ counters) { \
        mmq_f16<T, NT>(ps, x16, factors, outliers, cap, k, row_bytes, n, partial, counters);   \
    }

MMQ_F16(q4_k, Q4_K_F16, 4)
MMQ_F16(q4_k, Q4_K_F16, 8)
MMQ_F16(q6_k, Q6_K_F16, 4)
MMQ_F16(q6_k, Q6_K_F16, 8)
