// (After tensor_core.cuh and matvec_q8.cu, whose Products, weight_at and 8-bit row format it
// takes.) Batched decoding on the tensor cores: y[n × m] = x̃[n × k] · Wᵀ for 4 to 16 8-bit
// activation rows (more take mmq_f16.cu's kernels), with int8 products (mma.sync m16n8k32 / m16n8k16, s8 × s8 → s32) of the
// weights' integer quants and the rows' int8 values, each block of 32 (Q6_K: 16) values scaled
// in f32 after its integer sum, as the dp4a kernels of matvec_q8.cu do. Every weight byte is
// read from DRAM once for all n rows: the mat-vec kernels there stream the weight once per group
// of 8 rows, and cuBLAS needs the weight dequantized to f16 first (written and read again: 13.4
// GB a 7B decode step).
//
// A block of TC_WARPS warps owns TC_ROWS consecutive weight rows, each warp 16 of them (the M
// side of the products: a weight row g of the warp's 16 is matrix row g); the activation rows
// are the N side, NT tiles of 8. The block walks its slice of the super-blocks of 256 values:
// each step copies the n rows' 256 int8 values and 8 (d, d·Σq) pairs into shared memory
// (cp.async, two stages), while each warp loads its 16 rows' next super-block into registers,
// straight from DRAM: no weight byte is used by two warps, so staging the weights would only
// add a copy. The weights are loaded before the kernel waits for the one before it (they are no
// kernel's output), so the first loads overlap the previous kernel's tail.
//
// Slices: a 4096-row weight has only 64 blocks of 64 rows, too few to keep 132 SMs' loads in
// flight, so gridDim.y slices split the super-blocks. Each slice's block writes its sums to
// `partial`, and the last of a tile's slices to arrive (a counter per tile, which it resets
// for the next launch) adds them up in slice order and writes y: the same bits whichever
// arrives last.

#define TC_WARPS 4
#define TC_ROWS (16 * TC_WARPS)
#define TC_K 256  // activation values per stage: one super-block

// The int8 product of a 16×32 tile a (rows g, g + 8 in a[0], a[1] and a[2], a[3]: columns 4c..
// and 16 + 4c.., g = lane / 4, c = lane % 4) and a 32×8 tile b (column g, rows 4c.. in b[0],
// 16 + 4c.. in b[1]): d[0], d[1] are row g, columns 2c and 2c + 1; d[2], d[3] row g + 8.
__device__ __forceinline__ void mma_s8_k32(int (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

// The same for a 16×16 tile a (row g in a0, g + 8 in a1, columns 4c..) and a 16×8 tile b.
__device__ __forceinline__ void mma_s8_k16(int (&d)[4], u32 a0, u32 a1, u32 b) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

// 8 bytes from global to shared memory (cp.async's 16-byte form skips L1 and needs 16-byte
// pieces; the (d, d·Σq) pairs are scattered into another layout).
__device__ __forceinline__ void copy_async_8(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(shared_address(dst)),
                 "l"(src));
}

// An integer sum of fewer than 2^22 in magnitude as a float: the exponent trick of matmul.cu
// (an add and a subtract at full rate, where I2F is a quarter-rate conversion on sm_90). A build
// with I2F instead was 2-3% faster at 64 rows and within 1.2% at 4 and 16 in one call
// (docs/benchmarks.md, 2026-11-29), but its tests were not run: a lead.
__device__ __forceinline__ float small_int_to_float(int i) {
    return __int_as_float(0x4B400000 + i) - 12582912.0f;
}

// The shared-memory stage of one super-block: n activation rows of TC_K int8 values (STRIDE
// bytes apart, which spreads a warp's fragment loads over all banks) and the (d, d·Σq) of their
// 8 blocks, block-major, so that a lane's two columns are one 16-byte load.
template <int NT, int STRIDE>
struct Stage {
    signed char q[8 * NT * STRIDE];
    float2 ds[TC_K / 32][8 * NT];
};

// Copies super-block sb of the n rows into stage s (each thread its share; rows n .. 8 NT stay
// as they are: their columns of the products are never written).
template <int NT, int STRIDE>
__device__ __forceinline__ void stage_rows(Stage<NT, STRIDE>& s, const signed char* xq,
                                           const float2* xd, int k, int n, int sb) {
    for (int i = threadIdx.x; i < n * (TC_K / 16); i += 32 * TC_WARPS) {
        const int row = i / (TC_K / 16), piece = i % (TC_K / 16);
        copy_async_16(s.q + row * STRIDE + 16 * piece,
                      xq + (long long)row * k + (long long)sb * TC_K + 16 * piece);
    }
    for (int i = threadIdx.x; i < n * (TC_K / 32); i += 32 * TC_WARPS) {
        const int row = i / (TC_K / 32), b = i % (TC_K / 32);
        copy_async_8(&s.ds[b][row], xd + (long long)row * (k / 32) + sb * (TC_K / 32) + b);
    }
}

// ------------------------------------------------------------------------------ weight types
// T::load(rows, sb, c) loads super-block sb of a lane's two weight rows (g and g + 8), the part
// that lane c of the row's four takes; T::step<NT>(raw, stage, lane, acc) adds their products
// with the stage's activation rows: acc[t] holds rows g, g + 8 × columns 8t + 2c, 8t + 2c + 1
// as the mma's d.

// Q4_K: pair p of a super-block (qs[32p .. 32p + 32)) holds sub-block 2p in its low nibbles and
// 2p + 1 in its high ones. The products only need each k-step's columns paired alike in the
// weights and activations, so lane c takes bytes 8c .. 8c + 8 of every pair and of the
// activations' 32-blocks (8 bytes in one load each, where the mma's own order would take two).
// Σ (d sc q − dmin mn)·x̃ = d sc d_x Σ q·q_x − dmin mn Σ x̃.
struct Q4_K_TC {
    using Deq = deq::Q4_K;
    static constexpr int BB = 144;
    static constexpr int STRIDE = TC_K + 32;  // 8-byte loads of rows 4 apart meet no bank twice
    struct Raw {
        uint4 head[2];
        uint2 q[2][4];
    };
    static __device__ Raw load(const Row (&rows)[2], int sb, int c) {
        Raw r;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const u8* b = rows[i].q + (long long)sb * BB;
            r.head[i] = ld128(b);
#pragma unroll
            for (int p = 0; p < 4; p++) r.q[i][p] = ld64(b + 16 + 32 * p + 8 * c);
        }
        return r;
    }
    template <int NT>
    static __device__ void step(const Raw& raw, const Stage<NT, STRIDE>& s, int lane,
                                float (&acc)[NT][4]) {
        const int g = lane >> 2, c = lane & 3;
        float2 dm[2];
#pragma unroll
        for (int i = 0; i < 2; i++) dm[i] = h2f2(raw.head[i].x);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int p = j >> 1, shift = 4 * (j & 1);
            float dl[2], ml[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                u32 sc, mn;
                scale_min_k4(j, raw.head[i].y, raw.head[i].z, raw.head[i].w, sc, mn);
                dl[i] = dm[i].x * (float)sc;
                ml[i] = dm[i].y * (float)mn;
            }
            const u32 a[4] = {(raw.q[0][p].x >> shift) & LO4, (raw.q[1][p].x >> shift) & LO4,
                              (raw.q[0][p].y >> shift) & LO4, (raw.q[1][p].y >> shift) & LO4};
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const uint2 b = *(const uint2*)(s.q + (8 * t + g) * STRIDE + 32 * j + 8 * c);
                int d[4];
                mma_s8_k32(d, a, b.x, b.y);
                const float4 x = *(const float4*)&s.ds[j][8 * t + 2 * c];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = e >> 1;  // weight row g or g + 8
                    const float xd = e & 1 ? x.z : x.x, xs = e & 1 ? x.w : x.y;
                    acc[t][e] = __fmaf_rn(dl[i] * xd, small_int_to_float(d[e]),
                                          __fmaf_rn(-ml[i], xs, acc[t][e]));
                }
            }
        }
    }
};

// Q6_K: element 128h + 32s + l of a super-block has its low 4 bits in the low (s < 2) or high
// nibble of ql[64h + 32(s % 2) + l] and its top 2 bits at bits 2s of qh[32h + l], less 32; its
// scale is scales[8h + 2s + l / 16]. The two scales of a 32-block take one k16 product each
// (the mma's own column order: lane c holds columns 4c.. of each half), and the two integer
// sums meet, each times its scale, in one exact int (|Σ| < 2^24) before the f32 scaling.
// The blocks as the backend uploads them (weight_row.cuh): 208 bytes of ql, qh and scales,
// 16-byte aligned, so that each word is one load and the scales one 16-byte load; d in the row's
// plane.
struct Q6_K_TC {
    using Deq = deq::Q6_K;
    static constexpr int BB = 208;
    static constexpr int STRIDE = TC_K + 16;  // 4-byte loads of rows 8 apart meet no bank twice
    struct Raw {
        u32 ql[2][8];  // [row][4h + 2(s % 2) + half]: ql bytes 16 (that index) + 4c ..
        u32 qh[2][4];  // [row][2h + half]: qh bytes 16 (that index) + 4c ..
        u32 sc[2][4];
        u32 d[2];
    };
    static __device__ Raw load(const Row (&rows)[2], int sb, int c) {
        Raw r;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const Row block = rows[i].from_block(sb, BB);
            const u8* a = block.q + 4 * c;
#pragma unroll
            for (int w = 0; w < 8; w++) r.ql[i][w] = ld32(a + 16 * w);
#pragma unroll
            for (int w = 0; w < 4; w++) r.qh[i][w] = ld32(a + 128 + 16 * w);
            const uint4 sc = ld128(block.q + 192);
            r.sc[i][0] = sc.x;
            r.sc[i][1] = sc.y;
            r.sc[i][2] = sc.z;
            r.sc[i][3] = sc.w;
            r.d[i] = ld16(block.d);
        }
        return r;
    }
    template <int NT>
    static __device__ void step(const Raw& raw, const Stage<NT, STRIDE>& s, int lane,
                                float (&acc)[NT][4]) {
        const int g = lane >> 2, c = lane & 3;
        float d[2];
#pragma unroll
        for (int i = 0; i < 2; i++) d[i] = h2f((unsigned short)raw.d[i]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int h = j >> 2, sh = j & 3;
            u32 q[2][2];  // [half][row]
            int sc[2][2];  // [row][half]
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const u32 ql = raw.ql[i][4 * h + 2 * (sh & 1) + u];
                    const u32 lo4 = sh < 2 ? ql & LO4 : (ql >> 4) & LO4;
                    const u32 hi2 = ((raw.qh[i][2 * h + u] >> (2 * sh)) & 0x03030303u) << 4;
                    q[u][i] = (u32)minus32(lo4 | hi2);
                    const int byte = 8 * h + 2 * sh + u;
                    sc[i][u] = (int)(signed char)(raw.sc[i][byte >> 2] >> (8 * (byte & 3)));
                }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const signed char* x = s.q + (8 * t + g) * STRIDE + 32 * j + 4 * c;
                int lo[4], hi[4];
                mma_s8_k16(lo, q[0][0], q[0][1], *(const u32*)x);
                mma_s8_k16(hi, q[1][0], q[1][1], *(const u32*)(x + 16));
                const float4 xd = *(const float4*)&s.ds[j][8 * t + 2 * c];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = e >> 1;
                    const int sum = sc[i][0] * lo[e] + sc[i][1] * hi[e];
                    acc[t][e] = __fmaf_rn(d[i] * (e & 1 ? xd.z : xd.x), (float)sum, acc[t][e]);
                }
            }
        }
    }
};

// ---------------------------------------------------------------------------------- the kernel

// What both kinds of tensor-core kernel do with their sums (acc[t] as the mma's d: rows row0,
// row0 + 8 × columns 8t + 2c, 8t + 2c + 1): with slices, each block writes its sums to `partial`
// and the last of a tile's slices to arrive (a counter per tile, which it resets for the next
// launch) adds them up in slice order, so that y has the same bits whichever arrives last (`last`,
// shared, says which); then the rows' outliers are added in f32 and y written.
template <class T, int NT>
__device__ __forceinline__ void finish_tc(float (&acc)[NT][4], const Row (&rows)[2], int row0,
                                          int m, int n, float* __restrict__ y,
                                          const u32* __restrict__ outliers, int cap,
                                          float4* __restrict__ partial,
                                          u32* __restrict__ counters, bool& last) {
    const int b = blockIdx.x, slices = gridDim.y, slice = blockIdx.y;
    const int c = threadIdx.x & 3;
    if (slices > 1) {
        const long long tile = (long long)b * slices;
        float4* mine = partial + (tile + slice) * NT * (32 * TC_WARPS);
#pragma unroll
        for (int t = 0; t < NT; t++)
            mine[t * 32 * TC_WARPS + threadIdx.x] =
                make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]);
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            last = atomicAdd(&counters[b], 1u) == (u32)slices - 1;
            if (last) counters[b] = 0;
        }
        __syncthreads();
        if (!last) return;
        __threadfence();
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
        for (int i = 0; i < slices; i++) {
            const float4* part = partial + (tile + i) * NT * (32 * TC_WARPS);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float4 v = __ldcg(part + t * 32 * TC_WARPS + threadIdx.x);
                acc[t][0] += v.x;
                acc[t][1] += v.y;
                acc[t][2] += v.z;
                acc[t][3] += v.w;
            }
        }
    }

#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = row0 + 8 * (e >> 1), col = 8 * t + 2 * c + (e & 1);
            if (row >= m || col >= n) continue;
            float v = acc[t][e];
            const u32* o = outliers + (long long)col * (1 + 2 * cap);
            for (u32 i = 0; i < o[0]; i++)
                v = __fmaf_rn(weight_at<typename T::Deq>(rows[e >> 1], (int)o[1 + 2 * i]),
                              __uint_as_float(o[2 + 2 * i]), v);
            y[(long long)col * m + row] = v;
        }
}

template <class T, int NT>
__device__ __forceinline__ void mmq_tc(const Products& ps, const signed char* __restrict__ xq,
                                       const float2* __restrict__ xd,
                                       const u32* __restrict__ outliers, int cap, int k,
                                       long long row_bytes, int n, float4* __restrict__ partial,
                                       u32* __restrict__ counters) {
    const int b = blockIdx.x;
    const Product product = product_of_block(ps, b);
    const u8* __restrict__ w = product.w;
    float* __restrict__ y = product.y;
    const int m = product.m, first = product.first;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = (b - first) * TC_ROWS + 16 * warp + g;  // and row0 + 8
    const Row rows[2] = {weight_row<T::BB>(w, min(row0, m - 1), m, row_bytes),
                         weight_row<T::BB>(w, min(row0 + 8, m - 1), m, row_bytes)};
    const int slices = gridDim.y, slice = blockIdx.y, blocks = k / TC_K;
    const int sb0 = slice * blocks / slices, sb1 = (slice + 1) * blocks / slices;

    __shared__ __align__(16) Stage<NT, T::STRIDE> stages[2];
    // finish_tc's; declared after the stages, which so start at offset 0 (declared in finish_tc,
    // before them, it cost the 1-tile kernel an add per address and 7B's 4 sequences 5%).
    __shared__ bool last;
    start_dependents();
    typename T::Raw raw = T::load(rows, sb0, c);
    wait_for_producers();
    stage_rows(stages[0], xq, xd, k, n, sb0);
    copy_async_commit();
    float acc[NT][4] = {};
    for (int sb = sb0; sb < sb1; sb++) {
        const int s = (sb - sb0) & 1;
        if (sb + 1 < sb1) stage_rows(stages[s ^ 1], xq, xd, k, n, sb + 1);
        copy_async_commit();
        const typename T::Raw next = sb + 1 < sb1 ? T::load(rows, sb + 1, c) : raw;
        copy_async_wait<1>();
        __syncthreads();
        T::template step<NT>(raw, stages[s], lane, acc);
        __syncthreads();  // before the next step's copies overwrite this stage
        raw = next;
    }

    finish_tc<T, NT>(acc, rows, row0, m, n, y, outliers, cap, partial, counters, last);
}

// mmq_tc_<type>_<NT>: up to 8 NT activation rows (n of them), their NT tiles of 8 fixed so that
// the accumulators stay in registers: 1 and 2 tiles (`TC_TILES` in matmul.rs); 4 and 8 are
// mmq_f16.cu's. Powers of two only: all 8 counts took NVRTC twice as long.
#define MMQ_TC(name, T, NT)                                                                    \
    extern "C" __global__ void __launch_bounds__(32 * TC_WARPS) mmq_tc_##name##_##NT(          \
        const Products ps, const signed char* __restrict__ xq, const float2* __restrict__ xd, \
        const u32* __restrict__ outliers, int cap, int k, long long row_bytes, int n,          \
        float4* __restrict__ partial, u32* __restrict__ counters) {                            \
        mmq_tc<T, NT>(ps, xq, xd, outliers, cap, k, row_bytes, n, partial, counters);          \
    }
#define MMQ_TC_ALL(name, T) MMQ_TC(name, T, 1) MMQ_TC(name, T, 2)

MMQ_TC_ALL(q4_k, Q4_K_TC)
MMQ_TC_ALL(q6_k, Q6_K_TC)
