// Fused forms of the model's composite ops (Backend::add_rms_norm, rope_store_kv, the gated
// FFN's activation): one launch where the primitives take two or three, each computing
// exactly what the primitives' kernels compute, in the same order. The *_q8 forms, for
// decoding, also write the 8-bit rows of what they write for the products that read it
// (after quantize_q8.cuh and norm_q8.cuh).

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// sum = a + b, and out = RMSNorm(sum) in groups of `group` (rms_norm.cu's arithmetic): one
// block per group.
extern "C" __global__ void add_rms_norm(const float* a, const float* b, const float* weight,
                                        float* sum, float* out, unsigned int group, float eps) {
    start_dependents();
    wait_for_producers();
    __shared__ float warp_sums[32];
    const unsigned long long base = (unsigned long long)blockIdx.x * group;
    float ss = 0.0f;
    for (unsigned int i = threadIdx.x; i < group; i += blockDim.x) {
        const float s = a[base + i] + b[base + i];
        sum[base + i] = s;
        ss += s * s;
    }
    ss = warp_sum(ss);
    const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_sums[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        ss = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        ss = warp_sum(ss);
        if (lane == 0) warp_sums[0] = ss;
    }
    __syncthreads();
    const float inv = rsqrtf(warp_sums[0] / group + eps);
    // Each thread reads back only the sums it wrote.
    for (unsigned int i = threadIdx.x; i < group; i += blockDim.x)
        out[base + i] = sum[base + i] * inv * weight[i];
}

// The values a + b of rows before add_rms_norm's norm.
struct SumOf {
    const float *a, *b;
    __device__ __forceinline__ float at(long long i) const { return a[i] + b[i]; }
    __device__ __forceinline__ float4 at4(long long i) const {
        const float4 x = *(const float4*)(a + i), y = *(const float4*)(b + i);
        return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
};

// add_rms_norm of rows of one group each (k values, k a multiple of 32), with their 8-bit rows
// for the products (norm_q8.cuh). At most 64 registers, so that two blocks share an SM: a 7B
// step of 64 sequences launches 512 blocks, which at 70 registers ran one an SM (64 sequences:
// 7B +3%, TinyLlama +2% on an H200; docs/benchmarks.md, 2026-11-30).
extern "C" __global__ void __launch_bounds__(QUANTIZE_THREADS, 2)
    add_rms_norm_q8(const float* a, const float* b, const float* weight, float* sum, float* out,
                    int k, float eps, float factor, signed char* qs,
                    float2* ds, unsigned int* outliers, int cap) {
    start_dependents();
    wait_for_producers();
    norm_rows_q8(SumOf{a, b}, weight, sum, out, k, eps,
                 Q8Rows{qs, ds, outliers, cap, factor});
}

// Rotates one pair of a head in place (rope.cu's arithmetic).
__device__ __forceinline__ void rotate(float* h, unsigned int pair, unsigned int half, int neox,
                                       double s, double c) {
    const unsigned int a = neox ? pair : 2 * pair;
    const unsigned int b = neox ? pair + half : 2 * pair + 1;
    const double xa = h[a], xb = h[b];
    h[a] = (float)(xa * c - xb * s);
    h[b] = (float)(xa * s + xb * c);
}

// RoPE on each token's Q and K heads, in place, then its K and V rows into its slot as f16
// (kv.cu's store_kv). One block per (token, head): block y < n_head rotates query head y, the
// others key head y - n_head, and store that key head and the value head of the same index;
// a decoded token thus spreads over n_head + n_head_kv blocks instead of one.
extern "C" __global__ void rope_store_kv(float* q, float* k, const float* v,
                                         const unsigned int* positions, const double* inv_freq,
                                         const unsigned int* slots, unsigned short* k_cache,
                                         unsigned short* v_cache, unsigned int n_head,
                                         unsigned int n_head_kv, unsigned int head_dim,
                                         unsigned int n_rot, int neox, unsigned int v_width) {
    start_dependents();
    wait_for_producers();
    const unsigned int t = blockIdx.x, y = blockIdx.y, half = n_rot / 2;
    const double pos = positions[t];
    const unsigned int k_width = n_head_kv * head_dim;
    const bool query = y < n_head;
    const unsigned int kh = y - n_head;
    float* head = query ? q + ((unsigned long long)t * n_head + y) * head_dim
                        : k + (unsigned long long)t * k_width + kh * head_dim;
    for (unsigned int i = threadIdx.x; i < half; i += blockDim.x) {
        double s, c;
        sincos(pos * inv_freq[i], &s, &c);
        rotate(head, i, half, neox, s, c);
    }
    if (query) return;  // the whole block: y is the block's
    // Every thread stores what other threads rotated.
    __syncthreads();
    const unsigned long long slot = slots[t];
    for (unsigned int i = threadIdx.x; i < head_dim; i += blockDim.x)
        k_cache[slot * k_width + kh * head_dim + i] = f2h(head[i]);
    const unsigned int v_head = v_width / n_head_kv;
    for (unsigned int i = threadIdx.x; i < v_head; i += blockDim.x)
        v_cache[slot * v_width + kh * v_head + i] =
            f2h(v[(unsigned long long)t * v_width + kh * v_head + i]);
}

// act(x) · u, `act` 0 SiLU, 1 GELU-tanh (elementwise.cu's arithmetic).
__device__ __forceinline__ float gated(float x, float u, int act) {
    const float SQRT_2_OVER_PI = 0.7978845608028654f;
    const float g = act == 0
        ? x / (1.0f + expf(-x))
        : 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
    return g * u;
}

// act(gate + gate_bias) * (up + up_bias), the biases optional (has_* = 0: none; the pointer
// is then not read). `act` 0 is SiLU, 1 GELU-tanh (elementwise.cu's arithmetic).
extern "C" __global__ void gated_activation_bias(const float* gate, const float* gate_bias,
                                                 int has_gate_bias, const float* up,
                                                 const float* up_bias, int has_up_bias,
                                                 float* out, unsigned int width, int act,
                                                 unsigned long long n) {
    start_dependents();
    wait_for_producers();
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        float x = gate[i], u = up[i];
        if (has_gate_bias) x += gate_bias[i % width];
        if (has_up_bias) u += up_bias[i % width];
        out[i] = gated(x, u, act);
    }
}

// gated_activation_bias of rows of k values (k a multiple of 32), with their 8-bit rows for
// the down projection, quantized by slices (quantize_q8.cuh): a block computes QUANTIZE_VALUES
// values of row blockIdx.y, one a thread. (Quantized as the norms are, every block computed
// the whole row's 11,008 activations of a 7B for the row's statistics: 6.0 µs a launch in ncu.)
extern "C" __global__ void __launch_bounds__(QUANTIZE_THREADS)
    gated_activation_bias_q8(const float* gate, const float* gate_bias, int has_gate_bias,
                             const float* up, const float* up_bias, int has_up_bias, float* out,
                             int k, int act, float factor, signed char* qs, float2* ds,
                             unsigned int* outliers, int cap, float2* partials,
                             unsigned int* counters) {
    start_dependents();
    wait_for_producers();
    const long long base = (long long)blockIdx.y * k;
    const float *g = gate + base, *u = up + base;
    const auto value = [&](int i) {
        float x = g[i], v = u[i];
        if (has_gate_bias) x += gate_bias[i];
        if (has_up_bias) v += up_bias[i];
        return gated(x, v, act);
    };
    const int i = QUANTIZE_VALUES * blockIdx.x + threadIdx.x;
    float v = 0.0f;
    if (i < k) {
        v = value(i);
        out[base + i] = v;
    }
    q8_finish_slices(v, value, k, Q8Rows{qs, ds, outliers, cap, factor}, partials, counters);
}
