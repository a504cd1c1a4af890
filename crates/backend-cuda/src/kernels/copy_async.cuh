// Asynchronous copies from global into shared memory (sm_80 and later), as PTX: a thread
// queues many 16-byte copies without holding registers for them, so a block can have all of
// a tile's loads in flight at once.

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned int shared_address(const void* p) {
    unsigned int a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes from global to shared memory, bypassing L1, in the current group of copies.
__device__ __forceinline__ void copy_async_16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(dst)),
                 "l"(src));
}

// The same copy where `copy` is set, else 16 zero bytes into `dst` (`src` is not read).
__device__ __forceinline__ void copy_async_16_or_zero(void* dst, const void* src, bool copy) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_address(dst)),
                 "l"(src), "r"(copy ? 16 : 0));
}

// Closes the current group of asynchronous copies.
__device__ __forceinline__ void copy_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N groups of this thread's asynchronous copies are still in flight.
template <int N>
__device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
