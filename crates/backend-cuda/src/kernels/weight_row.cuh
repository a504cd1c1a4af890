// (First of the matrix kernels' sources.) A weight row as the kernels address it.
//
// Every type keeps a row's blocks at q, one row every row_bytes bytes. Q6_K's blocks as the
// backend uploads them (crates/backend-cuda/src/q6_k_layout.rs) are GGUF's blocks without their
// f16 scale d, 208 bytes each, 16-byte aligned; the scales lie in a plane after the last row,
// 2 bytes a block in the same order, and d is where the row's start. Only the Q6_K kernels read
// d (the compiler drops it from the others), and a Row converts to its blocks' address, which is
// all that the other types' loads take.

typedef unsigned char u8;

struct Row {
    const u8* q;
    const u8* d;
    __device__ __forceinline__ operator const u8*() const { return q; }
    // The row from its block i on, blocks of bb bytes.
    __device__ __forceinline__ Row from_block(long long i, int bb) const {
        return Row{q + i * bb, d + 2 * i};
    }
};

// Row r of the m rows at w, each row_bytes bytes of BB-byte blocks.
template <int BB>
__device__ __forceinline__ Row weight_row(const u8* w, long long r, long long m, long long row_bytes) {
    return Row{w + r * row_bytes, w + m * row_bytes + 2 * r * (row_bytes / BB)};
}
