// (After f16.cuh and weight_row.cuh.) Dequantization of single GGUF blocks, bit-exact with
// plumb_ggml::dequantize_row (and so with ggml): the same f32 operations in the same order.
// Products and sums are written with the _rn intrinsics, which the compiler never contracts into
// FMAs (an FMA rounds once where ggml rounds twice).
//
// T::deq(block, p, y) makes the P consecutive elements Pp .. Pp + P of a block (a Row from that
// block on; the types other than Q6_K take its address): 8 for the quantized types (a piece of a
// block), 1 for the float types (whose rows may have any length).
// Shared by the dequantizing kernels (dequant.cu) and the 8-bit matrix-vector products
// (matvec_q8.cu), which dequantize the weights that meet an activation outlier; in a namespace
// of its own, since matmul.cu names its structs after the same types.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

namespace deq {

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
        // The piece's 8 bytes of qs in one load: blocks of 144 bytes lie 16-byte aligned (the
        // products in matmul.cu load them so), and eight byte loads a thread made the cuBLAS
        // path's dequant_q4_k 40% of a 64-sequence decode step (20 µs a launch).
        const uint2 qs = *(const uint2*)(b + 16 + 32 * pair + l0);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const u32 byte = ((i < 4 ? qs.x : qs.y) >> (8 * (i & 3))) & 0xFF;
            const int q = (byte >> (4 * n)) & 0xF;
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
// at bits 2s of qh[32h + l], scale scales[8h + 2s + l / 16]. The blocks as the backend uploads
// them (weight_row.cuh): ql, qh and scales at b.q, d at b.d.
struct Q6_K {
    static constexpr int BE = 256, BB = 208, P = 8;
    static __device__ void deq(const Row& b, int p, float* y) {
        const int h = p >> 4, s = (p >> 2) & 3, l0 = 8 * (p & 3);
        const u8* q = b.q;
        const float d = rdh(b.d);
        const float ds = __fmul_rn(d, (float)(signed char)q[192 + 8 * h + 2 * s + l0 / 16]);
        for (int i = 0; i < 8; i++) {
            const int l = l0 + i;
            const int lo = (q[64 * h + 32 * (s & 1) + l] >> (4 * (s >> 1))) & 0xF;
            const int hi = (q[128 + 32 * h + l] >> (2 * s)) & 3;
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

}  // namespace deq
