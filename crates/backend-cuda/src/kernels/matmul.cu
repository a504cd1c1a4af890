// (After f16.cuh, weight_row.cuh and blocks.cuh.) Matrix-vector products for decoding:
// y[n × m] = x[n × k] · Wᵀ for n ≤ 8, read straight from the blocks of W (GGUF's; Q6_K's as
// weight_row.cuh says), with f32 activations and f32 accumulation.
//
// Each warp owns R consecutive rows of W. A row is cut into chunks of CH elements (a block, or
// a fixed part of one); lane l takes chunks l, l + 32, ... so that the warp reads contiguous
// bytes, loads MV_AHEAD chunks ahead of their use, dequantizes them in registers and
// multiplies them with all n activation rows, so that each weight byte is read once for the n
// rows. Lanes' partial sums meet in a shuffle reduction.
//
// Quantized integers become floats without I2F (a quarter-rate conversion on sm_90): OR-ing an
// integer v < 2^23 into the mantissa of 2^23 gives the float 2^23 + v, and one add (or one FMA
// that also undoes a power-of-two position) subtracts the bias and the type's offset exactly.
// A field sitting at bit p of a word is masked in place and its float scaled by 2^-p, which
// saves a shift per field.
//
// The weight buffer must have 16 bytes of padding past its data: 2-byte-aligned blocks are read
// as aligned words, which may reach 4 bytes past a block.

typedef unsigned char u8;
typedef unsigned int u32;

#define MAGIC 0x4B000000u  // the float 2^23

// Loads of weight bytes, which are read once: first in line for eviction from L1, so that the
// activations, which every warp reads, stay there. They are still cached (no_allocate was 7%
// slower on a 7B Q4_K_M decode): a warp's loads of unaligned blocks read each sector through
// several instructions, and L1 serves all but the first.
__device__ __forceinline__ u32 ld32(const u8* p) {
    u32 v;
    asm volatile("ld.global.nc.L1::evict_first.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ u32 ld16(const u8* p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::evict_first.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ld64(const u8* p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::evict_first.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 ld128(const u8* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::evict_first.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// NW words of the bytes at p, which is 2-byte aligned: NW + 1 aligned loads and funnel shifts.
template <int NW>
__device__ __forceinline__ void ld_a2(const u8* p, u32 (&out)[NW]) {
    const u8* a = (const u8*)((size_t)p & ~(size_t)3);
    const u32 shift = ((u32)(size_t)p & 2u) * 8u;
    u32 t[NW + 1];
#pragma unroll
    for (int i = 0; i <= NW; i++) t[i] = ld32(a + 4 * i);
#pragma unroll
    for (int i = 0; i < NW; i++) out[i] = __funnelshift_r(t[i], t[i + 1], shift);
}

__device__ __forceinline__ float2 h2f2(u32 h) {
    float a, b;
    asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.f16 %0, lo; cvt.f32.f16 %1, hi; }"
        : "=f"(a), "=f"(b)
        : "r"(h));
    return make_float2(a, b);
}

// The value of the field (v & mask), mask covering bits p.. (p + width ≤ 23), minus off.
template <u32 MASK, int P>
__device__ __forceinline__ float field(u32 v, float off) {
    const float f = __uint_as_float(MAGIC | (v & MASK));
    if (P == 0) return __fadd_rn(f, -(8388608.0f + off));
    return __fmaf_rn(f, 1.0f / (float)(1u << P), -((float)(1u << (23 - P)) + off));
}

// The 8 nibbles of a word, minus off: lo[i] = low nibble of byte i, hi[i] = its high nibble.
__device__ __forceinline__ void nibbles(u32 w, float off, float (&lo)[4], float (&hi)[4]) {
    lo[0] = field<0xFu, 0>(w, off);
    hi[0] = field<0xF0u, 4>(w, off);
    lo[1] = field<0xF00u, 8>(w, off);
    hi[1] = field<0xF000u, 12>(w, off);
    lo[2] = field<0xF0000u, 16>(w, off);
    const u32 v = w >> 12;
    hi[2] = field<0xF00u, 8>(v, off);
    lo[3] = field<0xF000u, 12>(v, off);
    hi[3] = field<0xF0000u, 16>(v, off);
}

// The 4 bytes of a word, minus off.
__device__ __forceinline__ void bytes(u32 w, float off, float (&f)[4]) {
    f[0] = field<0xFFu, 0>(w, off);
    f[1] = field<0xFF00u, 8>(w, off);
    const u32 v = w >> 16;
    f[2] = field<0xFFu, 0>(v, off);
    f[3] = field<0xFF00u, 8>(v, off);
}

// Spreads bits 0..3 of v to bit 4 of bytes 0..3 (the fifth bit of 5-bit quants).
__device__ __forceinline__ u32 spread4(u32 v) { return ((v & 0xFu) * 0x02040810u) & 0x10101010u; }

__device__ __forceinline__ float4 ldx4(const float* p) { return __ldg((const float4*)p); }

__device__ __forceinline__ float dot4(const float (&q)[4], float4 x, float s) {
    s = __fmaf_rn(q[0], x.x, s);
    s = __fmaf_rn(q[1], x.y, s);
    s = __fmaf_rn(q[2], x.z, s);
    return __fmaf_rn(q[3], x.w, s);
}

// ------------------------------------------------------------------------------ legacy quants
// Byte i of qs holds element i (low nibble) and i + 16 (high nibble). One chunk per block.

struct Q4_0 {
    static constexpr int CH = 32, BB = 18;
    struct Raw { u32 d, q[4]; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + c * BB;
        Raw r;
        r.d = ld16(b);
        ld_a2<4>(b + 2, r.q);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        float s[R][N] = {};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float lo[R][4], hi[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) nibbles(raw[r].q[t], 8.0f, lo[r], hi[r]);
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 xl = ldx4(x + (size_t)j * k + c * 32 + 4 * t);
                const float4 xh = ldx4(x + (size_t)j * k + c * 32 + 16 + 4 * t);
#pragma unroll
                for (int r = 0; r < R; r++) s[r][j] = dot4(hi[r], xh, dot4(lo[r], xl, s[r][j]));
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = h2f((unsigned short)raw[r].d);
#pragma unroll
            for (int j = 0; j < N; j++) acc[r][j] = __fmaf_rn(d, s[r][j], acc[r][j]);
        }
    }
};

// d·q + m: dequantized in registers (w = q·d + m), so no sum of x is needed.
struct Q4_1 {
    static constexpr int CH = 32, BB = 20;
    struct Raw { u32 dm, q[4]; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + c * BB;
        Raw r;
        r.dm = ld32(b);
#pragma unroll
        for (int t = 0; t < 4; t++) r.q[t] = ld32(b + 4 + 4 * t);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float lo[R][4], hi[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float2 dm = h2f2(raw[r].dm);
                nibbles(raw[r].q[t], 0.0f, lo[r], hi[r]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    lo[r][i] = __fmaf_rn(lo[r][i], dm.x, dm.y);
                    hi[r][i] = __fmaf_rn(hi[r][i], dm.x, dm.y);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 xl = ldx4(x + (size_t)j * k + c * 32 + 4 * t);
                const float4 xh = ldx4(x + (size_t)j * k + c * 32 + 16 + 4 * t);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][j] = dot4(hi[r], xh, dot4(lo[r], xl, acc[r][j]));
            }
        }
    }
};

// Bit i of qh is the fifth bit of element i.
struct Q5_0 {
    static constexpr int CH = 32, BB = 22;
    struct Raw { u32 d, qh, q[4]; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + c * BB;
        Raw r;
        r.d = ld16(b);
        u32 w[5];
        ld_a2<5>(b + 2, w);
        r.qh = w[0];
#pragma unroll
        for (int t = 0; t < 4; t++) r.q[t] = w[t + 1];
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        float s[R][N] = {};
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float lo[R][4], hi[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32 w = raw[r].q[t];
                bytes((w & 0x0F0F0F0Fu) | spread4(raw[r].qh >> (4 * t)), 16.0f, lo[r]);
                bytes(((w >> 4) & 0x0F0F0F0Fu) | spread4(raw[r].qh >> (16 + 4 * t)), 16.0f, hi[r]);
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 xl = ldx4(x + (size_t)j * k + c * 32 + 4 * t);
                const float4 xh = ldx4(x + (size_t)j * k + c * 32 + 16 + 4 * t);
#pragma unroll
                for (int r = 0; r < R; r++) s[r][j] = dot4(hi[r], xh, dot4(lo[r], xl, s[r][j]));
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float d = h2f((unsigned short)raw[r].d);
#pragma unroll
            for (int j = 0; j < N; j++) acc[r][j] = __fmaf_rn(d, s[r][j], acc[r][j]);
        }
    }
};

struct Q5_1 {
    static constexpr int CH = 32, BB = 24;
    struct Raw { u32 dm, qh, q[4]; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + c * BB;
        Raw r;
        r.dm = ld32(b);
        r.qh = ld32(b + 4);
#pragma unroll
        for (int t = 0; t < 4; t++) r.q[t] = ld32(b + 8 + 4 * t);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float lo[R][4], hi[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float2 dm = h2f2(raw[r].dm);
                const u32 w = raw[r].q[t];
                bytes((w & 0x0F0F0F0Fu) | spread4(raw[r].qh >> (4 * t)), 0.0f, lo[r]);
                bytes(((w >> 4) & 0x0F0F0F0Fu) | spread4(raw[r].qh >> (16 + 4 * t)), 0.0f, hi[r]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    lo[r][i] = __fmaf_rn(lo[r][i], dm.x, dm.y);
                    hi[r][i] = __fmaf_rn(hi[r][i], dm.x, dm.y);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 xl = ldx4(x + (size_t)j * k + c * 32 + 4 * t);
                const float4 xh = ldx4(x + (size_t)j * k + c * 32 + 16 + 4 * t);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][j] = dot4(hi[r], xh, dot4(lo[r], xl, acc[r][j]));
            }
        }
    }
};

// A chunk is a quarter block: 8 consecutive elements, so that 4 lanes share a block's scale.
struct Q8_0 {
    static constexpr int CH = 8, BB = 34;
    struct Raw { u32 d, q[2]; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + (c >> 2) * BB;
        Raw r;
        r.d = ld16(b);
        ld_a2<2>(b + 2 + 8 * (c & 3), r.q);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        float q[R][2][4];
#pragma unroll
        for (int r = 0; r < R; r++) {
            // Flipping the sign bits makes the i8 quants unsigned, offset by 128.
            bytes(raw[r].q[0] ^ 0x80808080u, 128.0f, q[r][0]);
            bytes(raw[r].q[1] ^ 0x80808080u, 128.0f, q[r][1]);
        }
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 x0 = ldx4(x + (size_t)j * k + c * 8);
            const float4 x1 = ldx4(x + (size_t)j * k + c * 8 + 4);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r][j] = __fmaf_rn(h2f((unsigned short)raw[r].d), dot4(q[r][1], x1, dot4(q[r][0], x0, 0.0f)), acc[r][j]);
        }
    }
};

// ------------------------------------------------------------------------------------ k-quants

// Scale and min of sub-block j of Q4_K/Q5_K from the 12 packed bytes in words s0, s1, s2. No
// branch: j differs between the lanes of a warp, which would take both sides one after the other.
__device__ __forceinline__ void scale_min_k4(int j, u32 s0, u32 s1, u32 s2, u32& sc, u32& mn) {
    const int shift = 8 * (j & 3);
    const u32 b0 = (s0 >> shift) & 0xFF, b1 = (s1 >> shift) & 0xFF, b2 = (s2 >> shift) & 0xFF;
    const bool high = j >= 4;
    sc = high ? (b2 & 0xF) | ((b0 >> 6) << 4) : b0 & 63;
    mn = high ? (b2 >> 4) | ((b1 >> 6) << 4) : b1 & 63;
}

// 8 chunks of 32 per block: chunk c holds qs[16c .. 16c + 16), that is pair p = c / 2 at
// l0 = 16 (c % 2): its low nibbles are elements 64p + l0 + i (sub-block 2p), its high ones
// elements 64p + 32 + l0 + i (sub-block 2p + 1).
struct Q4_K {
    static constexpr int CH = 32, BB = 144;
    struct Raw { uint4 head, q; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + (c >> 3) * BB;
        return Raw{ld128(b), ld128(b + 16 + 16 * (c & 7))};
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        const int p = (c & 7) >> 1;
        const int e = (c >> 3) * 256 + 64 * p + 16 * (c & 1);
        float dl[R], ml[R], dh[R], mh[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float2 dm = h2f2(raw[r].head.x);
            u32 sc, mn;
            scale_min_k4(2 * p, raw[r].head.y, raw[r].head.z, raw[r].head.w, sc, mn);
            dl[r] = dm.x * (float)sc;
            ml[r] = dm.y * (float)mn;
            scale_min_k4(2 * p + 1, raw[r].head.y, raw[r].head.z, raw[r].head.w, sc, mn);
            dh[r] = dm.x * (float)sc;
            mh[r] = dm.y * (float)mn;
        }
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float lo[R][4], hi[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32 w = t == 0 ? raw[r].q.x : t == 1 ? raw[r].q.y : t == 2 ? raw[r].q.z : raw[r].q.w;
                nibbles(w, 0.0f, lo[r], hi[r]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    lo[r][i] = __fmaf_rn(lo[r][i], dl[r], -ml[r]);
                    hi[r][i] = __fmaf_rn(hi[r][i], dh[r], -mh[r]);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 xl = ldx4(x + (size_t)j * k + e + 4 * t);
                const float4 xh = ldx4(x + (size_t)j * k + e + 32 + 4 * t);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][j] = dot4(hi[r], xh, dot4(lo[r], xl, acc[r][j]));
            }
        }
    }
};

// As Q4_K, with the fifth bit of element 64p + 32n + l at bit 2p + n of qh[l].
struct Q5_K {
    static constexpr int CH = 32, BB = 176;
    struct Raw { uint4 head, qh, q; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + (c >> 3) * BB;
        return Raw{ld128(b), ld128(b + 16 + 16 * (c & 1)), ld128(b + 48 + 16 * (c & 7))};
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        const int p = (c & 7) >> 1;
        const int e = (c >> 3) * 256 + 64 * p + 16 * (c & 1);
        float dl[R], ml[R], dh[R], mh[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float2 dm = h2f2(raw[r].head.x);
            u32 sc, mn;
            scale_min_k4(2 * p, raw[r].head.y, raw[r].head.z, raw[r].head.w, sc, mn);
            dl[r] = dm.x * (float)sc;
            ml[r] = dm.y * (float)mn;
            scale_min_k4(2 * p + 1, raw[r].head.y, raw[r].head.z, raw[r].head.w, sc, mn);
            dh[r] = dm.x * (float)sc;
            mh[r] = dm.y * (float)mn;
        }
#pragma unroll
        for (int t = 0; t < 4; t++) {
            float lo[R][4], hi[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32 w = t == 0 ? raw[r].q.x : t == 1 ? raw[r].q.y : t == 2 ? raw[r].q.z : raw[r].q.w;
                const u32 h = t == 0 ? raw[r].qh.x : t == 1 ? raw[r].qh.y : t == 2 ? raw[r].qh.z : raw[r].qh.w;
                const u32 hl = ((h >> (2 * p)) & 0x01010101u) << 4;
                const u32 hh = ((h >> (2 * p + 1)) & 0x01010101u) << 4;
                bytes((w & 0x0F0F0F0Fu) | hl, 0.0f, lo[r]);
                bytes(((w >> 4) & 0x0F0F0F0Fu) | hh, 0.0f, hi[r]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    lo[r][i] = __fmaf_rn(lo[r][i], dl[r], -ml[r]);
                    hi[r][i] = __fmaf_rn(hi[r][i], dh[r], -mh[r]);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 xl = ldx4(x + (size_t)j * k + e + 4 * t);
                const float4 xh = ldx4(x + (size_t)j * k + e + 32 + 4 * t);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][j] = dot4(hi[r], xh, dot4(lo[r], xl, acc[r][j]));
            }
        }
    }
};

// 8 chunks of 32 per block: chunk c is half h = c / 4 at l0 = 8 (c % 4), the 8 elements
// 128h + 32s + l0 + i for each s in 0..4. Element 128h + 32s + l has its low 4 bits in the low
// (s < 2) or high nibble of ql[64h + 32(s % 2) + l] and its top 2 bits at bits 2s of
// qh[32h + l]; its scale is scales[8h + 2s + l / 16]. The blocks as the backend uploads them
// (weight_row.cuh): 208 bytes of ql, qh and scales, 16-byte aligned, so that a chunk's four
// 8-byte pieces are a load each, and d in the row's plane.
struct Q6_K {
    static constexpr int CH = 32, BB = 208;
    struct Raw { u32 a[2], b[2], h[2], sc[2], d; };
    static __device__ Raw load(const Row& row, int c) {
        const Row block = row.from_block(c >> 3, BB);
        const u8* b = block.q;
        const int h = (c >> 2) & 1, l0 = 8 * (c & 3);
        const uint2 a = ld64(b + 64 * h + l0), hb = ld64(b + 64 * h + 32 + l0);
        const uint2 qh = ld64(b + 128 + 32 * h + l0), sc = ld64(b + 192 + 8 * h);
        return Raw{{a.x, a.y}, {hb.x, hb.y}, {qh.x, qh.y}, {sc.x, sc.y}, ld16(block.d)};
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        const int e = (c >> 3) * 256 + 128 * ((c >> 2) & 1) + 8 * (c & 3);
        const int half16 = (c & 3) >> 1;  // l0 / 16: which of the two scales of a 32-run
#pragma unroll
        for (int s = 0; s < 4; s++) {
            float q[R][2][4], ds[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const u32 scw = raw[r].sc[s >> 1] >> (16 * (s & 1) + 8 * half16);
                ds[r] = h2f((unsigned short)raw[r].d) * (float)(int)(signed char)(scw & 0xFF);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const u32 ql = s & 1 ? raw[r].b[i] : raw[r].a[i];
                    const u32 lo4 = s < 2 ? ql & 0x0F0F0F0Fu : (ql >> 4) & 0x0F0F0F0Fu;
                    const u32 hi2 = s == 0 ? raw[r].h[i] << 4 : s == 1 ? raw[r].h[i] << 2
                                  : s == 2 ? raw[r].h[i] : raw[r].h[i] >> 2;
                    bytes(lo4 | (hi2 & 0x30303030u), 32.0f, q[r][i]);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 x0 = ldx4(x + (size_t)j * k + e + 32 * s);
                const float4 x1 = ldx4(x + (size_t)j * k + e + 32 * s + 4);
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r][j] = __fmaf_rn(ds[r], dot4(q[r][1], x1, dot4(q[r][0], x0, 0.0f)), acc[r][j]);
            }
        }
    }
};

// 8 chunks of 32 per block: chunk c is half h = c / 4, group g = (c / 2) % 2, l0 = 8 (c % 2),
// the 8 elements 128h + 32s + 16g + l0 + i for each shift s in 0..4, at bits 2s of
// qs[32h + 16g + l0 + i], in sub-block 8h + 2s + g.
struct Q2_K {
    static constexpr int CH = 32, BB = 84;
    struct Raw { u32 q[2], sc[2], dm; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + (c >> 3) * BB;
        const int h = (c >> 2) & 1, g = (c >> 1) & 1, l0 = 8 * (c & 1);
        Raw r;
        r.q[0] = ld32(b + 16 + 32 * h + 16 * g + l0);
        r.q[1] = ld32(b + 20 + 32 * h + 16 * g + l0);
        r.sc[0] = ld32(b + 8 * h);
        r.sc[1] = ld32(b + 8 * h + 4);
        r.dm = ld32(b + 80);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        const int h = (c >> 2) & 1, g = (c >> 1) & 1;
        const int e = (c >> 3) * 256 + 128 * h + 16 * g + 8 * (c & 1);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            float q[R][2][4];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float2 dm = h2f2(raw[r].dm);
                const u32 sc = (raw[r].sc[s >> 1] >> (16 * (s & 1) + 8 * g)) & 0xFF;
                const float dl = dm.x * (float)(sc & 0xF), ml = dm.y * (float)(sc >> 4);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    bytes((raw[r].q[i] >> (2 * s)) & 0x03030303u, 0.0f, q[r][i]);
#pragma unroll
                    for (int t = 0; t < 4; t++) q[r][i][t] = __fmaf_rn(q[r][i][t], dl, -ml);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 x0 = ldx4(x + (size_t)j * k + e + 32 * s);
                const float4 x1 = ldx4(x + (size_t)j * k + e + 32 * s + 4);
#pragma unroll
                for (int r = 0; r < R; r++) acc[r][j] = dot4(q[r][1], x1, dot4(q[r][0], x0, acc[r][j]));
            }
        }
    }
};

// Chunks as Q2_K; the high bit of element 128h + 32s + 16g + l is bit 4h + s of hmask[16g + l]
// (set: no −4), and the 6-bit scale of sub-block j is biased by 32.
struct Q3_K {
    static constexpr int CH = 32, BB = 110;
    struct Raw { u32 q[2], hm[2], sc[3], d; };
    static __device__ Raw load(const u8* row, int c) {
        const u8* b = row + (c >> 3) * BB;
        const int h = (c >> 2) & 1, g = (c >> 1) & 1, l0 = 8 * (c & 1);
        Raw r;
        ld_a2<2>(b + 32 + 32 * h + 16 * g + l0, r.q);
        ld_a2<2>(b + 16 * g + l0, r.hm);
        ld_a2<3>(b + 96, r.sc);
        r.d = ld16(b + 108);
        return r;
    }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        const int h = (c >> 2) & 1, g = (c >> 1) & 1;
        const int e = (c >> 3) * 256 + 128 * h + 16 * g + 8 * (c & 1);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            float q[R][2][4], ds[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int j = 8 * h + 2 * s + g;
                const u32 low = (raw[r].sc[(j & 7) >> 2] >> (8 * (j & 3) + 4 * (j >> 3))) & 0xF;
                const u32 high = (raw[r].sc[2] >> (8 * (j & 3) + 2 * (j >> 2))) & 3;
                ds[r] = h2f((unsigned short)raw[r].d) * (float)((int)(low | (high << 4)) - 32);
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const u32 lo2 = (raw[r].q[i] >> (2 * s)) & 0x03030303u;
                    const u32 hb = ((raw[r].hm[i] >> (4 * h + s)) & 0x01010101u) << 2;
                    bytes(lo2 | hb, 4.0f, q[r][i]);
                }
            }
#pragma unroll
            for (int j = 0; j < N; j++) {
                const float4 x0 = ldx4(x + (size_t)j * k + e + 32 * s);
                const float4 x1 = ldx4(x + (size_t)j * k + e + 32 * s + 4);
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r][j] = __fmaf_rn(ds[r], dot4(q[r][1], x1, dot4(q[r][0], x0, 0.0f)), acc[r][j]);
            }
        }
    }
};

// -------------------------------------------------------------------------------------- floats
// Chunks of 16 bytes; the host sends rows whose length is a whole number of chunks here.

struct F16 {
    static constexpr int CH = 8, BB = 16;
    struct Raw { uint4 v; };
    static __device__ Raw load(const u8* row, int c) { return Raw{ld128(row + c * BB)}; }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        float w[R][2][4];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float2 a = h2f2(raw[r].v.x), b = h2f2(raw[r].v.y);
            const float2 cc = h2f2(raw[r].v.z), d = h2f2(raw[r].v.w);
            w[r][0][0] = a.x; w[r][0][1] = a.y; w[r][0][2] = b.x; w[r][0][3] = b.y;
            w[r][1][0] = cc.x; w[r][1][1] = cc.y; w[r][1][2] = d.x; w[r][1][3] = d.y;
        }
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 x0 = ldx4(x + (size_t)j * k + c * 8);
            const float4 x1 = ldx4(x + (size_t)j * k + c * 8 + 4);
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][j] = dot4(w[r][1], x1, dot4(w[r][0], x0, acc[r][j]));
        }
    }
};

struct BF16 {
    static constexpr int CH = 8, BB = 16;
    struct Raw { uint4 v; };
    static __device__ Raw load(const u8* row, int c) { return Raw{ld128(row + c * BB)}; }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
        float w[R][2][4];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const u32 v[4] = {raw[r].v.x, raw[r].v.y, raw[r].v.z, raw[r].v.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                w[r][i >> 1][2 * (i & 1)] = __uint_as_float(v[i] << 16);
                w[r][i >> 1][2 * (i & 1) + 1] = __uint_as_float(v[i] & 0xFFFF0000u);
            }
        }
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 x0 = ldx4(x + (size_t)j * k + c * 8);
            const float4 x1 = ldx4(x + (size_t)j * k + c * 8 + 4);
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][j] = dot4(w[r][1], x1, dot4(w[r][0], x0, acc[r][j]));
        }
    }
};

struct F32 {
    static constexpr int CH = 4, BB = 16;
    struct Raw { uint4 v; };
    static __device__ Raw load(const u8* row, int c) { return Raw{ld128(row + c * BB)}; }
    template <int N, int R>
    static __device__ void dot(const Raw (&raw)[R], const float* x, int k, int c, float (&acc)[R][N]) {
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 x0 = ldx4(x + (size_t)j * k + c * 4);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float w[4] = {__uint_as_float(raw[r].v.x), __uint_as_float(raw[r].v.y),
                                    __uint_as_float(raw[r].v.z), __uint_as_float(raw[r].v.w)};
                acc[r][j] = dot4(w, x0, acc[r][j]);
            }
        }
    }
};

// ---------------------------------------------------------------------------------- the kernel

#define WARPS 4     // warps per block
#define MV_AHEAD 2  // chunks each lane loads ahead of their use
#define ROWS 2      // rows per warp, which share each load of x

template <class T, int N, int R, int U>
__device__ __forceinline__ void matvec(const u8* __restrict__ w, const float* __restrict__ x,
                                       float* __restrict__ y, int k, int m, long long row_bytes) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * WARPS + (threadIdx.x >> 5)) * R;
    Row rows[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        rows[r] = weight_row<T::BB>(w, max(min(row0 + r, m - 1), 0), m, row_bytes);
    const int chunks = k / T::CH;
    // A lane's first chunks are loaded before the wait, as matvec_q8.cu's are: no kernel
    // writes the weights.
    typename T::Raw lead[U][R];
    if (row0 < m)
#pragma unroll
        for (int u = 0; u < U; u++)
            if (lane + 32 * u < chunks)
#pragma unroll
                for (int r = 0; r < R; r++) lead[u][r] = T::load(rows[r], lane + 32 * u);
    wait_for_producers();
    if (row0 >= m) return;
    float acc[R][N] = {};
#pragma unroll
    for (int u = 0; u < U; u++)
        if (lane + 32 * u < chunks) T::template dot<N, R>(lead[u], x, k, lane + 32 * u, acc);
    for (int c = lane + 32 * U; c < chunks; c += 32 * U) {
        typename T::Raw raw[U][R];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (c + 32 * u < chunks)
#pragma unroll
                for (int r = 0; r < R; r++) raw[u][r] = T::load(rows[r], c + 32 * u);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (c + 32 * u < chunks) T::template dot<N, R>(raw[u], x, k, c + 32 * u, acc);
    }
    // The next kernel is let in only when this block's weights are read, as in matvec_q8.cu.
    // Let in at the start, with no loads before the wait, 7B F16 tg128 on an H200 ran at 200 –
    // 202 tokens/s, and at 222 – 224 with both (docs/benchmarks.md, 2026-11-29, sixth round).
    start_dependents();
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < N; j++) {
            float v = acc[r][j];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == r * N + j && row0 + r < m) y[(long long)j * m + row0 + r] = v;
        }
}

#define MV(name, T, N, R)                                                                      \
    extern "C" __global__ void __launch_bounds__(32 * WARPS)                                   \
        mv_##name##_##N(const u8* __restrict__ w, const float* __restrict__ x,                 \
                        float* __restrict__ y, int k, int m, long long row_bytes) {             \
        matvec<T, N, R, MV_AHEAD>(w, x, y, k, m, row_bytes);                                   \
    }
// R1 rows a warp for a single activation row, R for more (`matvec_rows_per_warp` in matmul.rs
// has the same numbers). Neither changes the order in which a row sums its chunks.
#define MV_ALL(name, T, R1, R) \
    MV(name, T, 1, R1) MV(name, T, 2, R) MV(name, T, 3, R) MV(name, T, 4, R) \
    MV(name, T, 5, R) MV(name, T, 6, R) MV(name, T, 7, R) MV(name, T, 8, R)

MV_ALL(q4_0, Q4_0, ROWS, ROWS)
MV_ALL(q4_1, Q4_1, ROWS, ROWS)
MV_ALL(q5_0, Q5_0, ROWS, ROWS)
MV_ALL(q5_1, Q5_1, ROWS, ROWS)
MV_ALL(q8_0, Q8_0, ROWS, ROWS)
MV_ALL(q2_k, Q2_K, ROWS, ROWS)
MV_ALL(q3_k, Q3_K, ROWS, ROWS)
MV_ALL(q4_k, Q4_K, ROWS, ROWS)
MV_ALL(q5_k, Q5_K, ROWS, ROWS)
MV_ALL(q6_k, Q6_K, ROWS, ROWS)
MV_ALL(f16, F16, 1, ROWS)
MV_ALL(bf16, BF16, 1, ROWS)
MV_ALL(f32, F32, ROWS, ROWS)
