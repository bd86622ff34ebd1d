// Device side of programmatic dependent launch (see common/launch.h for the contract). Both are no-ops when
// the kernel was launched without the PDL attribute.
#pragma once

namespace rill::cuda {

// Blocks until every kernel this one depends on has completed and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream start placing its CTAs (they wait in their own pdl_wait()). Issued by
// every CTA right after its wait: the dependent launches once all of this kernel's CTAs are resident, so it
// only takes SM room this kernel no longer needs.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The usual prologue: wait for the inputs, then release the next kernel.
__device__ __forceinline__ void pdl_prologue() {
  pdl_wait();
  pdl_launch_dependents();
}

}  // namespace rill::cuda
