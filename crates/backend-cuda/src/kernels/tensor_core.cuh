// Warp-level tensor-core products (sm_80 and later), as PTX: NVRTC has no mma.h of its own.
// Reads shared memory through copy_async.cuh's shared_address.

// Four 8×8 matrices of 16-bit values from shared memory: lanes 8i to 8i + 7 give the
// addresses of matrix i's rows; lane l receives row l / 4, columns 2(l % 4) and 2(l % 4) + 1
// of each matrix (of each matrix transposed, with `trans`).
__device__ __forceinline__ void load_matrix_x4(unsigned int* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

__device__ __forceinline__ void load_matrix_x4_trans(unsigned int* r, const void* row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(shared_address(row)));
}

// d += a · b for a 16×16 f16 tile a (row-major fragments), a 16×8 f16 tile b (column-major)
// and a 16×8 f32 tile d. With g = lane / 4 and c = lane % 4: a holds rows g, g + 8 ×
// columns 2c, 2c + 1 (a[0], a[1]) and 2c + 8, 2c + 9 (a[2], a[3]); b holds rows 2c, 2c + 1
// (b[0]) and 2c + 8, 2c + 9 (b[1]) of column g; d holds row g (d[0], d[1]) and row g + 8
// (d[2], d[3]), columns 2c and 2c + 1.
__device__ __forceinline__ void mma_16x8x16(float* d, const unsigned int* a,
                                            const unsigned int* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two floats as f16, `lo` in the low half (the lower column of a fragment).
__device__ __forceinline__ unsigned int pack_half2(float lo, float hi) {
    unsigned int r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
