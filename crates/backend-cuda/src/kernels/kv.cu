// The f16 KV cache: flat slots per layer, one K row and one V row each.

// Rounds each token's K and V rows to f16 and stores them in its slot.
extern "C" __global__ void store_kv(const float* k, const float* v, const unsigned int* slots,
                                    unsigned short* k_cache, unsigned short* v_cache,
                                    unsigned int k_width, unsigned int v_width,
                                    unsigned int n_tokens) {
    start_dependents();
    wait_for_producers();
    const unsigned int t = blockIdx.y;
    if (t >= n_tokens) return;
    const unsigned long long slot = slots[t];
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < k_width;
         i += gridDim.x * blockDim.x)
        k_cache[slot * k_width + i] = f2h(k[(unsigned long long)t * k_width + i]);
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < v_width;
         i += gridDim.x * blockDim.x)
        v_cache[slot * v_width + i] = f2h(v[(unsigned long long)t * v_width + i]);
}

// Copies n elements from src to dst within one buffer; the ranges never overlap (distinct
// blocks).
extern "C" __global__ void copy_within(unsigned short* buf, unsigned long long src,
                                       unsigned long long dst, unsigned long long n) {
    start_dependents();
    wait_for_producers();
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x)
        buf[dst + i] = buf[src + i];
}
