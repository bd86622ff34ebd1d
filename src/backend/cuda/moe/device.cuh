// Device helpers shared by the MoE kernels: bf16 vectors, rounding, the expert activations, MXFP4 decoding.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

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

// MXFP4 (spec §2.4). FP4 E2M1 code (4 bits) -> value, as backend/cpu/mxfp4.h: sign bit 3, magnitude
// {0, .5, 1, 1.5, 2, 3, 4, 6} (exponent e = bits 1-2, mantissa m = bit 0: 0.5 m when e = 0, else
// 2^(e-1) (1 + 0.5 m); every step exact).
__device__ __forceinline__ float fp4_e2m1(uint32_t code) {
  const uint32_t e = (code >> 1) & 3u, m = code & 1u;
  const float mag = e == 0u ? 0.5f * float(m) : __uint_as_float((126u + e) << 23) * (1.0f + 0.5f * float(m));
  return (code & 8u) ? -mag : mag;
}

// E8M0 scale byte -> 2^(s - 127) (s = 0: the subnormal 2^-127, kept: no flush-to-zero); 255 is NaN, as on
// the CPU (so every weight of its 32-column group is NaN, zeros included).
__device__ __forceinline__ float e8m0(uint32_t s) {
  if (s == 255u) return __uint_as_float(0x7fc00000u);
  return s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}

}  // namespace rill::cuda::moe
