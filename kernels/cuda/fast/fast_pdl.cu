// Programmatic dependent launch (PDL). With MOE_FAST_PDL=1 the host launches every kernel of the layer with
// the programmatic-stream-serialization attribute: a kernel may then be launched, and its blocks made
// resident, before the kernel before it on the stream has finished, so that its launch and its prologue
// (barrier set-up, tensor-map prefetch) overlap the other's last blocks instead of following them.
// The price is a rule every kernel of this translation unit keeps: pdl_wait() before its first global memory
// access, read or write. griddepcontrol.wait returns once the previous kernel has completed and its memory
// operations are visible, and since that kernel waited for its own predecessor, the whole stream before it
// has too. Without the attribute both instructions do nothing, so the same code serves both launches.
// pdl_trigger() lets the next kernel launch as soon as every block of this one has called it (or exited):
// early in the short kernels, when the persistent GEMMs have no tile left to claim.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// The short kernels' start: wait for the previous kernel, then let the next one launch.
__device__ __forceinline__ void pdl_begin() {
    pdl_wait();
    pdl_trigger();
}
