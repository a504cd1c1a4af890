// (After pdl.cuh, f16.cuh, weight_row.cuh and blocks.cuh.) Dequantizing kernels, bit-exact with
// plumb_ggml::dequantize_row: embedding lookups (get_rows, f32 out) and the weight side of the
// cuBLAS path (f16 out; f32 for BF16), each thread making one piece of P elements.
//
// Also here: the activations' conversion to f16 for that path, each row scaled by a power of
// two so that its largest magnitude lands in [2^14, 2^15), and the scaling back of the result.

using namespace deq;

// Piece `piece` (of k / P) of `row`, into y.
template <class T>
__device__ __forceinline__ void piece(const Row& row, long long piece, float* y) {
    constexpr int per_block = T::BE / T::P;
    T::deq(row.from_block(piece / per_block, T::BB), (int)(piece % per_block), y);
}

// out[i] = row rows[i] of w (m rows), f32. Grid: x over a row's pieces, y over the rows asked for.
template <class T>
__device__ __forceinline__ void get_rows(const u8* __restrict__ w, long long row_bytes, int m,
                                         const u32* __restrict__ rows, float* __restrict__ out,
                                         int k) {
    start_dependents();
    wait_for_producers();
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= k / T::P) return;
    float y[T::P];
    piece<T>(weight_row<T::BB>(w, rows[blockIdx.y], m, row_bytes), p, y);
    float* o = out + (long long)blockIdx.y * k + p * T::P;
    for (int i = 0; i < T::P; i++) o[i] = y[i];
}

// out = rows [row0, row0 + n_rows) of w (m rows), row-major, as f16 (O = u16) or f32 (O = float).
template <class T, class O>
__device__ __forceinline__ void dequant(const u8* __restrict__ w, long long row_bytes, int m,
                                        O* __restrict__ out, int k, long long row0, long long n_rows) {
    start_dependents();
    wait_for_producers();
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long per_row = k / T::P;
    if (p >= n_rows * per_row) return;
    const long long r = p / per_row, i = p % per_row;
    float y[T::P];
    piece<T>(weight_row<T::BB>(w, row0 + r, m, row_bytes), i, y);
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

#define GET_ROWS(name, T)                                                                      \
    extern "C" __global__ void get_rows_##name(const u8* w, long long row_bytes, int m,         \
                                               const u32* rows, float* out, int k) {           \
        get_rows<T>(w, row_bytes, m, rows, out, k);                                            \
    }
#define DEQUANT(name, T)                                                                       \
    GET_ROWS(name, T)                                                                          \
    extern "C" __global__ void dequant_##name(const u8* w, long long row_bytes, int m, u16* out, \
                                              int k, long long row0, long long n_rows) {       \
        dequant<T, u16>(w, row_bytes, m, out, k, row0, n_rows);                                \
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
extern "C" __global__ void dequant_bf16(const u8* w, long long row_bytes, int m, float* out,
                                        int k, long long row0, long long n_rows) {
    dequant<BF16, float>(w, row_bytes, m, out, k, row0, n_rows);
}

// Row blockIdx.x of x (n × k, f32) to f16, times 2^e with e chosen so that the row's largest
// magnitude lands in [2^14, 2^15): far from f16's overflow (65504) and from its subnormals, so
// that small values next to huge outliers keep f16's full precision. scale[row] = 2^-e undoes
// it. One block of X_TO_F16_THREADS threads per row.
#define X_TO_F16_THREADS 1024
extern "C" __global__ void __launch_bounds__(X_TO_F16_THREADS)
    x_to_f16(const float* __restrict__ x, u16* __restrict__ out, float* __restrict__ scale,
             int k) {
    start_dependents();
    wait_for_producers();
    __shared__ float part[X_TO_F16_THREADS / 32];
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
    start_dependents();
    wait_for_producers();
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) y[i] *= scale[i / m];
}
