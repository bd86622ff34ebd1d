// Device helpers of the MLA kernels: cp.async (zero-filling), ldmatrix and its lane addresses for the bf16
// m16n8k16 operands (the mma.sync itself is common/mma.cuh's `mma_bf16`), bf16 packing, and the plan look-up
// from a CTA index to its sequence.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mma.cuh"

namespace rill::cuda::mla {

// cp.async and ldmatrix: common/cp_async.cuh.

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
