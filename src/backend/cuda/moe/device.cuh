// Device helpers shared by the MoE kernels: bf16 rounding, the expert activations (SiLU; SiTU for Kimi K3),
// warp sums, and the MXFP4 decoding of K3's routed experts (bf16 vector loads: common/device_math.cuh).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

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

// MXFP4 (spec §2.4). FP4 E2M1 codes: sign bit 3, magnitude {0, .5, 1, 1.5, 2, 3, 4, 6} (exponent e = bits 1-2,
// mantissa m = bit 0: 0.5 m when e = 0, else 2^(e-1) (1 + 0.5 m)), decoded two at a time with integer ops:
// the magnitude bits (e1 e0 m) become a bf16's two lowest exponent bits and its top mantissa bit, the code's
// sign its sign. That bf16 is 2^(e-127) (1 + m/2) = fp4 * 2^-126 for e >= 1, and the subnormal m * 2^-127 =
// fp4 * 2^-126 for e = 0: every code is its value times 2^-126, exactly. The nibble at bits 0-3 of u goes to
// the low half, the one at bits 16-19 to the high half; u's other bits are masked off. Four integer ops for two
// codes, where a branchy float decode takes ~10 per code.
__device__ __forceinline__ uint32_t fp4x2_tiny_bits(uint32_t u) {
  return ((u << 6) & 0x01C001C0u) | ((u << 12) & 0x80008000u);
}

__device__ __forceinline__ __nv_bfloat162 bf162_from_bits(uint32_t b) {
  __nv_bfloat162 v;
  static_assert(sizeof(v) == sizeof(b));
  memcpy(&v, &b, sizeof(b));
  return v;
}

__device__ __forceinline__ uint32_t bits_from_bf162(__nv_bfloat162 v) {
  uint32_t b;
  memcpy(&b, &v, sizeof(b));
  return b;
}

// The two codes' values as bf16 (exact): fp4 * 2^-126 times 2^126 (bf16 0x7E80), a bf16 multiply, which keeps
// subnormal inputs (PTX bf16 arithmetic has no flush-to-zero) and is exact (the product is fp4 itself).
__device__ __forceinline__ __nv_bfloat162 fp4x2_to_bf162(uint32_t u) {
  return __hmul2(bf162_from_bits(fp4x2_tiny_bits(u)), bf162_from_bits(0x7E807E80u));
}

// E8M0 scale byte -> 2^(s - 127) (s = 0: the subnormal 2^-127, kept: no flush-to-zero); 255 is NaN, as on
// the CPU (so every weight of its 32-column group is NaN, zeros included).
__device__ __forceinline__ float e8m0(uint32_t s) {
  if (s == 255u) return __uint_as_float(0x7fc00000u);
  return s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}

// An E8M0 scale byte as a bf16 pair: bf16 has fp32's exponent range, so 2^(s - 127) is exact there too (s = 0:
// the bf16 subnormal 0x0040; 255: NaN). fp4 * this in bf16 is exact wherever fp4 * e8m0(s) is in fp32.
__device__ __forceinline__ __nv_bfloat162 e8m0_bf162(uint32_t s) {
  const uint32_t b = s == 255u ? 0x7FC0u : (s == 0u ? 0x0040u : s << 7);
  return bf162_from_bits(b | (b << 16));
}

// 16 MXFP4 codes (8 packed bytes in column order, low nibble = even column) times their group's E8M0 scale
// (e8m0_bf162), as 16 bf16 in column order: word j of `out` holds columns 2j (low half) and 2j + 1. Per
// 32-bit word (8 codes): pairs (i, i + 4) decoded by fp4x2_to_bf162, scaled by a second bf16 multiply (both
// exact), put back in column order by byte permutes.
__device__ __forceinline__ void mxfp4_dequant16(uint2 q, __nv_bfloat162 scale, uint32_t (&out)[8]) {
  const uint32_t words[2] = {q.x, q.y};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t pair[4];  // pair[i]: columns i (low half) and i + 4 (high half) of this word
#pragma unroll
    for (int i = 0; i < 4; ++i)
      pair[i] = bits_from_bf162(__hmul2(fp4x2_to_bf162(words[k] >> (4 * i)), scale));
    out[4 * k + 0] = __byte_perm(pair[0], pair[1], 0x5410);  // columns 0, 1
    out[4 * k + 1] = __byte_perm(pair[2], pair[3], 0x5410);  // 2, 3
    out[4 * k + 2] = __byte_perm(pair[0], pair[1], 0x7632);  // 4, 5
    out[4 * k + 3] = __byte_perm(pair[2], pair[3], 0x7632);  // 6, 7
  }
}

// An E8M0 scale as the bf16 factors that take fp4x2_tiny_bits to fp4 * 2^(s - 127): one multiply by 2^(s - 1)
// while that is a bf16 (s <= 128: weights of magnitude <= 6, as in real checkpoints), else 2^126 and then
// 2^(s - 127) (bf16 has fp32's exponent range; s = 255 is NaN). Every product is exact wherever
// fp4 * e8m0(s) is exact in fp32 (s = 0 gives bf16 subnormals), so the values are the CPU's.
struct Mxfp4Bf16Scale {
  __nv_bfloat162 first, second;
  bool two_steps;
};

__device__ __forceinline__ Mxfp4Bf16Scale mxfp4_bf16_scale(uint32_t s) {
  auto pair = [](uint32_t b) { return bf162_from_bits(b | (b << 16)); };
  if (s <= 128u) return {pair((s + 126u) << 7), pair(0x3F80u), false};
  return {pair(0x7E80u), pair(s == 255u ? 0x7FC0u : s << 7), true};
}

// Two FP4 codes (fp4x2_tiny_bits' nibbles of u) times their scale, as bf16 (exact).
__device__ __forceinline__ __nv_bfloat162 fp4x2_scaled_bf162(uint32_t u, const Mxfp4Bf16Scale& sc) {
  const __nv_bfloat162 v = __hmul2(bf162_from_bits(fp4x2_tiny_bits(u)), sc.first);
  return sc.two_steps ? __hmul2(v, sc.second) : v;
}

}  // namespace rill::cuda::moe
