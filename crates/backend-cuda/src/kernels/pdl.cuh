// Programmatic dependent launch (sm_90 on). With PLUMB_CUDA_PDL=1 the backend launches its
// kernels with the attribute that lets a kernel's blocks start while the kernel before it in the
// stream is still running (launch.rs), so that a decode step's small kernels need not pay a whole
// launch each. Every kernel of these sources therefore:
// - calls start_dependents(): the next kernel may then be launched once every block of this
//   one has called it (or exited). Most call it first; the mat-vecs (matvec_q8.cu, matmul.cu)
//   after their weights are read, so that the kernels after them do not run ahead into their
//   loads;
// - calls wait_for_producers() before it reads anything an earlier kernel wrote and before it
//   writes anything at all (an earlier kernel may still read what it would overwrite), in every
//   thread, unconditionally: it returns once every earlier kernel has finished and its writes
//   are visible, and a kernel that ends without it could let the next one run past an earlier
//   kernel that has not finished.
// Only the weights, which no kernel writes, may be read before it. Launched without the
// attribute (or below sm_90) both do nothing.

__device__ __forceinline__ void start_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_producers() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
