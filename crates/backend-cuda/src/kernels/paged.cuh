// The positions a token sees in the paged KV cache, shared by the attention kernels.

// The first position a token at `pos` sees: its last `window` positions (all when 0).
__device__ __forceinline__ unsigned int first_visible(unsigned int pos, unsigned int window) {
    return (window != 0 && pos + 1 > window) ? pos + 1 - window : 0;
}

// The positions [lo, hi) of split `split` of a token at `pos`: what it sees, cut into splits
// of `chunk` positions.
struct SplitRange {
    unsigned int lo, hi;
};
__device__ __forceinline__ SplitRange split_range(unsigned int pos, unsigned int window,
                                                  unsigned int split, unsigned int chunk) {
    const unsigned int lo = first_visible(pos, window) + split * chunk;
    return {lo, min(pos + 1, lo + chunk)};
}
