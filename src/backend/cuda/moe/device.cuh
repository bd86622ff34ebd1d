// Device helpers shared by the MoE kernels: bf16 vectors, rounding, the expert activations.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/common/device_math.cuh"

#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {

using rill::cuda::load_bf16;  // common/device_math.cuh
using rill::cuda::store_bf16;

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
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
