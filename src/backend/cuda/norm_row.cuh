// The steps of one row of (add_)rms_norm as device functions: the norm kernels (norm.cu) and the decode GEMV
// that folds add_rms_norm into its prologue (gemm/gemv.cuh) both run these, so the fused GEMV computes bit for
// bit what the separate kernel does — the same elements per thread, the same fp32 expressions, the same block
// reduction (block_sum), the same bf16 roundings (spec §3.0).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "backend/cuda/common/device_math.cuh"

namespace rill::cuda {

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// v = x[c, c + kVec) (+ delta: the updated residual, rounded to bf16 when the residual is bf16, exact in fp32
// otherwise). kAdd false: delta is unused.
template <int kVec, bool kAdd, typename X>
__device__ __forceinline__ void load_residual(const X* xr, const __nv_bfloat16* dr, int c, float (&v)[kVec]) {
  load_row<kVec>(xr + c, v);
  if constexpr (kAdd) {
    float d[kVec];
    load_bf16<kVec>(dr + c, d);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      if constexpr (std::is_same_v<X, __nv_bfloat16>)
        v[i] = round_bf16(v[i] + d[i]);
      else
        v[i] += d[i];
    }
  }
}

// ss += sum of v^2, in element order.
template <int kVec>
__device__ __forceinline__ void add_squares(const float (&v)[kVec], float& ss) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) ss += v[i] * v[i];
}

// The row's scale from the block's sum of squares.
__device__ __forceinline__ float rms_scale(float ss, int N, float eps) {
  return rsqrtf(ss / float(N) + eps);
}

// v = w * bf16(v * r) for columns [c, c + kVec) (stored as bf16 by the caller).
template <int kVec>
__device__ __forceinline__ void apply_norm(float (&v)[kVec], const float* w, int c, float r) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = w[c + i] * round_bf16(v[i] * r);
}

}  // namespace rill::cuda
