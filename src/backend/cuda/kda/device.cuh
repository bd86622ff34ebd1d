// Device helpers of the KDA kernels: 16-byte bf16 vectors, ex2, cp.async, ldmatrix, and the fragment loaders
// for the bf16 m16n8k16 tensor-core product, which itself is common/mma.cuh's `mma_bf16` (PTX ISA fragment
// layouts, g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major)  a0 = A[g][2t..2t+1]  a1 = A[g+8][2t..]  a2 = A[g][2t+8..]  a3 = A[g+8][2t+8..]
//   B (16 x 8, k x n)       b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]
//   C (16 x 8, fp32)        c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]
// The lower-indexed element of a pair sits in the low 16 bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mma.cuh"

namespace rill::cuda::kda {

using bf16 = __nv_bfloat16;

// --- 8 bf16 <-> 8 floats (one 16-byte access) ---
__device__ __forceinline__ void unpack8(const uint4& u, float (&x)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w[i]);
    const float2 f = __bfloat1622float2(h);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load8(const bf16* p, float (&x)[8]) {
  unpack8(*reinterpret_cast<const uint4*>(p), x);
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ void store8(bf16* p, const float (&x)[8]) {
  uint4 u;
  u.x = pack_bf16x2(x[0], x[1]);
  u.y = pack_bf16x2(x[2], x[3]);
  u.z = pack_bf16x2(x[4], x[5]);
  u.w = pack_bf16x2(x[6], x[7]);
  *reinterpret_cast<uint4*>(p) = u;
}

// 2^x (MUFU.EX2, ~2 ulp; flushes results below 2^-126 to zero, as wanted for decays).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

constexpr float kLog2e = 1.4426950408889634f;

// cp.async and ldmatrix: common/cp_async.cuh.

// Fragment loaders from bf16 smem tiles with row stride ld (elements); (r0, c0) is the tile's corner.
// A 16x16 stored row-major [m][k].
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* s, int ld, int r0, int c0, int lane) {
  ldsm_x4(a, s + (r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8);
}
// A 16x16 stored transposed, [k][m] (A[m][k] = s[k][m]): k0 = first k row, m0 = first m column.
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const bf16* s, int ld, int k0, int m0,
                                             int lane) {
  ldsm_x4_trans(a, s + (k0 + (lane & 7) + (lane >> 4) * 8) * ld + m0 + ((lane >> 3) & 1) * 8);
}
// B 16x8 stored [n][k] (rows n0..n0+7, columns k0..k0+15).
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[2], const bf16* s, int ld, int n0, int k0, int lane) {
  ldsm_x2(b, s + (n0 + (lane & 7)) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// Two B 16x8 tiles stored [k][n] (rows k0..k0+15, columns n0..n0+15): b0 = columns n0..n0+7, b1 = n0+8..
__device__ __forceinline__ void load_b_kn_x2(uint32_t (&b0)[2], uint32_t (&b1)[2], const bf16* s, int ld,
                                             int k0, int n0, int lane) {
  uint32_t r[4];
  ldsm_x4_trans(r, s + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}

}  // namespace rill::cuda::kda
