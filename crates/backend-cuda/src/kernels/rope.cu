// Rotary position embedding, in place. Thread = one pair of one head of one token. The angle
// is computed in double, as the reference does, so that long positions keep f32 precision:
// theta = pos * inv_freq[pair], where inv_freq already holds freq_scale and freq factors.

extern "C" __global__ void rope(float* x, const unsigned int* positions, const double* inv_freq,
                                unsigned int n_tokens, unsigned int n_heads,
                                unsigned int head_dim, unsigned int n_rot, int neox) {
    start_dependents();
    wait_for_producers();
    const unsigned int half = n_rot / 2;
    const unsigned long long n = (unsigned long long)n_tokens * n_heads * half;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int pair = i % half;
        const unsigned long long head = i / half;  // token * n_heads + head
        const unsigned int t = head / n_heads;
        double s, c;
        sincos((double)positions[t] * inv_freq[pair], &s, &c);
        float* h = x + head * head_dim;
        const unsigned int a = neox ? pair : 2 * pair;
        const unsigned int b = neox ? pair + half : 2 * pair + 1;
        const double xa = h[a], xb = h[b];
        h[a] = (float)(xa * c - xb * s);
        h[b] = (float)(xa * s + xb * c);
    }
}
