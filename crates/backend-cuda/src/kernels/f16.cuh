// f16 <-> f32 by the conversion instructions themselves: NVRTC has no cuda_fp16.h of its own,
// and the machine's CUDA headers may be missing. f16 values travel as their 16 bits.
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short f2h(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
