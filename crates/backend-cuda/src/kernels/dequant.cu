// (After f16.cuh.) Dequantization of GGUF blocks, bit-exact with plumb_ggml::dequantize_row (and so with
// ggml): the same f32 operations in the same order. Products and sums are written with the
// _rn intrinsics, which the compiler never contracts into FMAs (an FMA rounds once where ggml
// rounds twice).
//
// Each thread makes P consecutive elements of a row: 8 for the quantized types (a piece of a
// block), 1 for the float types (whose rows may have any length). Used for embedding lookups
// (get_rows, f32 out) and for the weight side of the cuBLAS path (f16 out; f32 for BF16).
//
// Also here: the activations' conversion to f16 for that path, each row scaled by a power of
// two so that its largest magnitude lands in [2^14, 2^15), and the scaling back of the result.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

__device__ __forceinline__ u32 rd16(const u8* p) { return p[0] | (p[1] << 8); }
__device__ __forceinline__ float rdh(const u8* p) { return h2f((u16)rd16(p)); }

// Q4_K / Q5_K: scale and min of sub-block j from the 12 packed bytes q.
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, int& sc, int& mn) {
    if (j < 4) {
        sc = q[j] & 63;
        mn = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Elements 8p .. 8p + 8 of block b.
struct Q4_0 {
    static constexpr int BE = 32, BB = 18, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const float d = rdh(b);
        const u8* qs = b + 2 + 8 * (p & 1);
        for (int i = 0; i < 8; i++) {
            const int q = p < 2 ? qs[i] & 0xF : qs[i] >> 4;
            y[i] = __fmul_rn((float)(q - 8), d);
        }
    }
};
struct Q4_1 {
    static constexpr int BE = 32, BB = 20, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const float d = rdh(b), m = rdh(b + 2);
        const u8* qs = b + 4 + 8 * (p & 1);
        for (int i = 0; i < 8; i++) {
            const int q = p < 2 ? qs[i] & 0xF : qs[i] >> 4;
            y[i] = __fadd_rn(__fmul_rn((float)q, d), m);
        }
    }
};
struct Q5_0 {
    static constexpr int BE = 32, BB = 22, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const float d = rdh(b);
        const u32 qh = rd16(b + 2) | (rd16(b + 4) << 16);
        for (int i = 0; i < 8; i++) {
            const int e = 8 * p + i;  // bit e of qh is the fifth bit of element e
            const int j = e & 15;
            const int q = (e < 16 ? b[6 + j] & 0xF : b[6 + j] >> 4) | (((qh >> e) & 1) << 4);
            y[i] = __fmul_rn((float)(q - 16), d);
        }
    }
};
struct Q5_1 {
    static constexpr int BE = 32, BB = 24, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const float d = rdh(b), m = rdh(b + 2);
        const u32 qh = rd16(b + 4) | (rd16(b + 6) << 16);
        for (int i = 0; i < 8; i++) {
            const int e = 8 * p + i;
            const int j = e & 15;
            const int q = (e < 16 ? b[8 + j] & 0xF : b[8 + j] >> 4) | (((qh >> e) & 1) << 4);
            y[i] = __fadd_rn(__fmul_rn((float)q, d), m);
        }
    }
};
struct Q8_0 {
    static constexpr int BE = 32, BB = 34, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const float d = rdh(b);
        for (int i = 0; i < 8; i++) y[i] = __fmul_rn((float)(signed char)b[2 + 8 * p + i], d);
    }
};

// Element 128h + 32s + 16g + l: bits 2s of qs[32h + 16g + l], sub-block 8h + 2s + g.
struct Q2_K {
    static constexpr int BE = 256, BB = 84, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const int h = p >> 4, s = (p >> 2) & 3, g = (p >> 1) & 1, l0 = 8 * (p & 1);
        const int sc = b[8 * h + 2 * s + g];
        const float dl = __fmul_rn(rdh(b + 80), (float)(sc & 0xF));
        const float ml = __fmul_rn(rdh(b + 82), (float)(sc >> 4));
        for (int i = 0; i < 8; i++) {
            const int q = (b[16 + 32 * h + 16 * g + l0 + i] >> (2 * s)) & 3;
            y[i] = __fsub_rn(__fmul_rn(dl, (float)q), ml);
        }
    }
};
// As Q2_K, with the high bit at bit 4h + s of hmask[16g + l] (clear: minus 4).
struct Q3_K {
    static constexpr int BE = 256, BB = 110, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const int h = p >> 4, s = (p >> 2) & 3, g = (p >> 1) & 1, l0 = 8 * (p & 1);
        const int j = 8 * h + 2 * s + g;
        const u8* sc = b + 96;
        const int low = j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4;
        const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        const float dl = __fmul_rn(rdh(b + 108), (float)((low | (high << 4)) - 32));
        for (int i = 0; i < 8; i++) {
            const int l = 16 * g + l0 + i;
            const int q = (b[32 + 32 * h + l] >> (2 * s)) & 3;
            const int minus = b[l] & (1 << (4 * h + s)) ? 0 : 4;
            y[i] = __fmul_rn(dl, (float)(q - minus));
        }
    }
};
// Element 64p + 32n + l: nibble n of qs[32p + l], sub-block 2p + n.
struct Q4_K {
    static constexpr int BE = 256, BB = 144, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const int pair = p >> 3, n = (p >> 2) & 1, l0 = 8 * (p & 3);
        int sc, mn;
        scale_min_k4(2 * pair + n, b + 4, sc, mn);
        const float d = __fmul_rn(rdh(b), (float)sc), m = __fmul_rn(rdh(b + 2), (float)mn);
        for (int i = 0; i < 8; i++) {
            const int q = (b[16 + 32 * pair + l0 + i] >> (4 * n)) & 0xF;
            y[i] = __fsub_rn(__fmul_rn(d, (float)q), m);
        }
    }
};
// As Q4_K, with the fifth bit at bit 2p + n of qh[l].
struct Q5_K {
    static constexpr int BE = 256, BB = 176, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const int pair = p >> 3, n = (p >> 2) & 1, l0 = 8 * (p & 3);
        int sc, mn;
        scale_min_k4(2 * pair + n, b + 4, sc, mn);
        const float d = __fmul_rn(rdh(b), (float)sc), m = __fmul_rn(rdh(b + 2), (float)mn);
        for (int i = 0; i < 8; i++) {
            const int l = l0 + i;
            const int q = ((b[48 + 32 * pair + l] >> (4 * n)) & 0xF) |
                          (((b[16 + l] >> (2 * pair + n)) & 1) << 4);
            y[i] = __fsub_rn(__fmul_rn(d, (float)q), m);
        }
    }
};
// Element 128h + 32s + l: low 4 bits in nibble s / 2 of ql[64h + 32(s % 2) + l], top 2 bits
// at bits 2s of qh[32h + l], scale scales[8h + 2s + l / 16].
struct Q6_K {
    static constexpr int BE = 256, BB = 210, P = 8;
    static __device__ void deq(const u8* b, int p, float* y) {
        const int h = p >> 4, s = (p >> 2) & 3, l0 = 8 * (p & 3);
        const float d = rdh(b + 208);
        const float ds = __fmul_rn(d, (float)(signed char)b[192 + 8 * h + 2 * s + l0 / 16]);
        for (int i = 0; i < 8; i++) {
            const int l = l0 + i;
            const int lo = (b[64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 0xF;
            const int hi = (b[128 + 32 * h + l] >> (2 * s)) & 3;
            y[i] = __fmul_rn(ds, (float)((lo | (hi << 4)) - 32));
        }
    }
};
struct F32 {
    static constexpr int BE = 1, BB = 4, P = 1;
    static __device__ void deq(const u8* b, int, float* y) {
        y[0] = __uint_as_float(rd16(b) | (rd16(b + 2) << 16));
    }
};
struct F16 {
    static constexpr int BE = 1, BB = 2, P = 1;
    static __device__ void deq(const u8* b, int, float* y) { y[0] = rdh(b); }
};
struct BF16 {
    static constexpr int BE = 1, BB = 2, P = 1;
    static __device__ void deq(const u8* b, int, float* y) { y[0] = __uint_as_float(rd16(b) << 16); }
};

// Piece `piece` (of k / P) of the row at `row`, into y.
template <class T>
__device__ __forceinline__ void piece(const u8* row, long long piece, float* y) {
    constexpr int per_block = T::BE / T::P;
    T::deq(row + (piece / per_block) * T::BB, (int)(piece % per_block), y);
}

// out[i] = row rows[i] of w, f32. Grid: x over a row's pieces, y over the rows asked for.
template <class T>
__device__ __forceinline__ void get_rows(const u8* __restrict__ w, long long row_bytes,
                                         const u32* __restrict__ rows, float* __restrict__ out,
                                         int k) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= k / T::P) return;
    float y[T::P];
    piece<T>(w + rows[blockIdx.y] * row_bytes, p, y);
    float* o = out + (long long)blockIdx.y * k + p * T::P;
    for (int i = 0; i < T::P; i++) o[i] = y[i];
}

// out = rows [row0, row0 + n_rows) of w, row-major, as f16 (O = u16) or f32 (O = float).
template <class T, class O>
__device__ __forceinline__ void dequant(const u8* __restrict__ w, long long row_bytes,
                                        O* __restrict__ out, int k, long long row0, long long n_rows) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per_row = k / T::P;
    if (p >= n_rows * per_row) return;
    const long long r = p / per_row, i = p % per_row;
    float y[T::P];
    piece<T>(w + (row0 + r) * row_bytes, i, y);
    O* o = out + r * k + i * T::P;
    if constexpr (sizeof(O) == 2 && T::P == 8) {
        // One 16-byte store (k is whole blocks, so o is 16-byte aligned): eight 2-byte
        // stores made a warp write each of its sectors eight times, and dequantizing a 7B
        // Q4_K matrix took 70 µs, a tenth of the bandwidth.
        u32 h[4];
        for (int e = 0; e < 4; e++) h[e] = f2h(y[2 * e]) | ((u32)f2h(y[2 * e + 1]) << 16);
        *(uint4*)o = make_uint4(h[0], h[1], h[2], h[3]);
    } else {
        for (int e = 0; e < T::P; e++) {
            if constexpr (sizeof(O) == 2) o[e] = f2h(y[e]);
            else o[e] = y[e];
        }
    }
}

#define GET_ROWS(name, T)                                                                         \
    extern "C" __global__ void get_rows_##name(const u8* w, long long row_bytes, const u32* rows, \
                                               float* out, int k) {                               \
        get_rows<T>(w, row_bytes, rows, out, k);                                                  \
    }
#define DEQUANT(name, T)                                                                       \
    GET_ROWS(name, T)                                                                          \
    extern "C" __global__ void dequant_##name(const u8* w, long long row_bytes, u16* out, int k, \
                                              long long row0, long long n_rows) {              \
        dequant<T, u16>(w, row_bytes, out, k, row0, n_rows);                                   \
    }

DEQUANT(q4_0, Q4_0)
DEQUANT(q4_1, Q4_1)
DEQUANT(q5_0, Q5_0)
DEQUANT(q5_1, Q5_1)
DEQUANT(q8_0, Q8_0)
DEQUANT(q2_k, Q2_K)
DEQUANT(q3_k, Q3_K)
DEQUANT(q4_k, Q4_K)
DEQUANT(q5_k, Q5_K)
DEQUANT(q6_k, Q6_K)
GET_ROWS(f32, F32)
GET_ROWS(f16, F16)
GET_ROWS(bf16, BF16)

// BF16 weights go to cuBLAS as f32 (TF32 products), since f16 lacks their range.
extern "C" __global__ void dequant_bf16(const u8* w, long long row_bytes, float* out, int k,
                                            long long row0, long long n_rows) {
    dequant<BF16, float>(w, row_bytes, out, k, row0, n_rows);
}

// Row blockIdx.x of x (n × k, f32) to f16, times 2^e with e chosen so that the row's largest
// magnitude lands in [2^14, 2^15): far from f16's overflow (65504) and from its subnormals, so
// that small values next to huge outliers keep f16's full precision. scale[row] = 2^-e undoes
// it. One block of 256 threads per row.
extern "C" __global__ void x_to_f16(const float* __restrict__ x, u16* __restrict__ out,
                                    float* __restrict__ scale, int k) {
    __shared__ float part[8];
    const float* xr = x + (long long)blockIdx.x * k;
    float amax = 0.0f;
    for (int i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(xr[i]));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) amax = fmaxf(amax, part[i]);
    // amax = f · 2^ex with f in [0.5, 1); 2^(15 - ex) takes it into [2^14, 2^15), or as close
    // as a finite f32 factor gets for tiny rows. A zero, infinite or NaN row is left unscaled
    // (its NaN or infinity stays one).
    float up = 1.0f;
    if (amax > 0.0f && amax <= 3.4e38f) {
        int ex;
        frexpf(amax, &ex);
        up = ldexpf(1.0f, min(15 - ex, 127));
    }
    if (threadIdx.x == 0) scale[blockIdx.x] = 1.0f / up;
    u16* o = out + (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < k; i += blockDim.x) o[i] = f2h(xr[i] * up);
}

// y[r][c] *= scale[r], for y of n rows of m.
extern "C" __global__ void scale_rows(float* __restrict__ y, const float* __restrict__ scale,
                                      int m, long long total) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] *= scale[i / m];
}
