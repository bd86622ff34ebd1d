// Device helpers of the MLA kernels: cp.async (zero-filling), ldmatrix and its lane addresses for the bf16
// m16n8k16 operands (the mma.sync itself is common/mma.cuh's `mma_bf16`), bf16 packing, and the plan look-up
// from a CTA index to its sequence.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/mma.cuh"

namespace rill::cuda::mla {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; when !valid the destination is zero-filled and `src` is not read.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}


__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {  // lo -> low half (lower address)
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// ldmatrix lane addresses for a 16x16 tile at (row0, col0) of a row-major smem array with leading dim ld:
// A operand (rows = m, cols = k), B operand from [n][k] storage, B operand from [k][n] storage (.trans).
__device__ __forceinline__ int lm_a_row(int lane) {
  return lane & 15;
}
__device__ __forceinline__ int lm_a_col(int lane) {
  return (lane >> 4) << 3;
}
__device__ __forceinline__ int lm_bnk_row(int lane) {
  return (lane & 7) + ((lane >> 4) << 3);
}
__device__ __forceinline__ int lm_bnk_col(int lane) {
  return ((lane >> 3) & 1) << 3;
}
__device__ __forceinline__ int lm_bkn_row(int lane) {
  return (lane & 7) + (((lane >> 3) & 1) << 3);
}
__device__ __forceinline__ int lm_bkn_col(int lane) {
  return (lane >> 4) << 3;
}

// The s with start[s] <= w < start[s + 1] (start[0] == 0 <= w < start[n]); empty entries are skipped.
__device__ __forceinline__ int find_seq(const int32_t* start, int n, int w) {
  int lo = 0, hi = n;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (start[mid] <= w)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace rill::cuda::mla
