// Device helpers shared by the MoE kernels: bf16 vectors, rounding, the expert activations.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// kVec consecutive bf16 (8: one 16-byte load) widened to fp32.
template <int kVec>
__device__ __forceinline__ void load_bf16(const bf16* p, float (&f)[kVec]) {
  if constexpr (kVec == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      f[2 * i] = t.x;
      f[2 * i + 1] = t.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) f[i] = __bfloat162float(p[i]);
  }
}

template <int kVec>
__device__ __forceinline__ void store_bf16(bf16* p, const float (&f)[kVec]) {
  if constexpr (kVec == 8) {
    uint4 v;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = v;
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) p[i] = __float2bfloat16_rn(f[i]);
  }
}

// act(gate) * up in fp32 (spec §3.6). g and u are the bf16-rounded GEMM outputs, as in the reference (and as
// the dense MLP path computes them: bf16 GEMM, then glu).
__device__ __forceinline__ float expert_act(Act act, float g, float u, float beta, float linear_beta) {
  if (act == Act::Silu) return g / (1.0f + expf(-g)) * u;
  const float a = beta * tanhf(g / beta) * (1.0f / (1.0f + expf(-g)));
  return a * (linear_beta * tanhf(u / linear_beta));
}

__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace rill::cuda::moe
