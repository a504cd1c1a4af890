// Elementwise ops over n floats, in grid-stride loops (after pdl.cuh).

#define GRID_STRIDE(i, n)                                                                  \
    start_dependents();                                                                    \
    wait_for_producers();                                                                  \
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; \
         i < (n); i += (unsigned long long)gridDim.x * blockDim.x)

extern "C" __global__ void add(const float* a, const float* b, float* out, unsigned long long n) {
    GRID_STRIDE(i, n) { out[i] = a[i] + b[i]; }
}

// x[i] += bias[i % width], in place.
extern "C" __global__ void add_bias(float* x, const float* bias, unsigned int width,
                                    unsigned long long n) {
    GRID_STRIDE(i, n) { x[i] += bias[i % width]; }
}

extern "C" __global__ void scale(float* x, float factor, unsigned long long n) {
    GRID_STRIDE(i, n) { x[i] *= factor; }
}

// x * sigmoid(x) * up (SwiGLU).
extern "C" __global__ void gated_silu(const float* gate, const float* up, float* out,
                                      unsigned long long n) {
    GRID_STRIDE(i, n) {
        float x = gate[i];
        out[i] = x / (1.0f + expf(-x)) * up[i];
    }
}

// GELU with the tanh approximation, times up (GeGLU).
extern "C" __global__ void gated_gelu_tanh(const float* gate, const float* up, float* out,
                                           unsigned long long n) {
    const float SQRT_2_OVER_PI = 0.7978845608028654f;
    GRID_STRIDE(i, n) {
        float x = gate[i];
        float g = 0.5f * x * (1.0f + tanhf(SQRT_2_OVER_PI * (x + 0.044715f * x * x * x)));
        out[i] = g * up[i];
    }
}

// out[r] = x[rows[r]], rows of width floats.
extern "C" __global__ void select_rows(const float* x, const unsigned int* rows, float* out,
                                       unsigned int width, unsigned long long n) {
    GRID_STRIDE(i, n) {
        unsigned long long r = i / width;
        out[i] = x[(unsigned long long)rows[r] * width + i % width];
    }
}
