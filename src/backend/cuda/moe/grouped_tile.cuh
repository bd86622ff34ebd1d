// Pieces shared by the grouped expert GEMM kernels (grouped_gemm.cu: bf16 experts, grouped_gemm_mxfp4.cu:
// MXFP4 experts), which differ only in how the B (weight) tile reaches shared memory: the tile -> expert
// lookup, the gate/up row interleave of B tiles, the 64 x 128 x 32 MMA step of 8 warps, and the epilogues
// (gate_up: bf16 gate and up, activation in fp32; down: bf16 output). cp.async and ldmatrix:
// common/cp_async.cuh.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/cp_async.cuh"
#include "backend/cuda/common/mma.cuh"
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {

// One CTA's 64-slot tile: its expert e and slots [seg + m0, seg + m0 + m_valid).
struct GroupedTile {
  int e, seg, m0, m_valid;
};

// The expert of grouped tile `tile` (binary search over the device tile offsets); false past the last tile.
__device__ __forceinline__ bool locate_tile(const GroupedGemmParams& p, int tile, GroupedTile& t) {
  if (tile >= p.tile_offsets[p.n_experts]) return false;
  int lo = 0,
      hi = p.n_experts - 1;  // the last expert whose first tile is <= tile (skips experts without tiles)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.tile_offsets[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  t.e = lo;
  t.seg = p.expert_offsets[lo];
  t.m0 = (tile - p.tile_offsets[lo]) * kBM;
  t.m_valid = min(kBM, p.expert_offsets[lo + 1] - t.seg - t.m0);
  return true;
}

// Row `ld_row` of the A tile: the activation row feeding that slot, nullptr past the expert's slots.
__device__ __forceinline__ const bf16* a_tile_row(const GroupedGemmParams& p, const GroupedTile& t,
                                                  int ld_row) {
  if (ld_row >= t.m_valid) return nullptr;
  const int slot = t.seg + t.m0 + ld_row;
  const int64_t r = p.slot_row ? p.slot_row[slot] : slot;
  return p.a + r * p.lda;
}

// Row r in [0, kBN) of a CTA's B tile whose first output column is n0: sets `col` to the output column it
// computes (>= n: padding, never stored) and returns the weight row it reads. gate_up: 8-row blocks alternate
// gate (weight rows [0, I)) and up (rows [I, 2I)), so a thread's accumulators hold gate and up of one column.
template <bool kGateUp>
__device__ __forceinline__ int b_tile_row(int r, int n0, int n, int& col) {
  if constexpr (kGateUp) {
    const int blk = r >> 3;
    col = n0 + (blk >> 1) * 8 + (r & 7);
    return (blk & 1 ? n : 0) + col;
  } else {
    col = n0 + r;
    return col;
  }
}

using GroupedAcc = float[2][4][4];

// acc += A . B^T over one 32-k tile from shared memory (rows padded to kLds). Warp (wm, wn) owns the 32 x 32
// output block at rows wm*32, columns wn*32.
__device__ __forceinline__ void mma_k_tile(GroupedAcc& acc, const bf16 (*As)[kLds], const bf16 (*Bs)[kLds],
                                           int wm, int wn, int lane) {
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    unsigned af[2][4], bf[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
      ldsm_x4(af[i], &As[wm * 32 + i * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
#pragma unroll
    for (int q = 0; q < 2; ++q)
      ldsm_x4(bf[q],
                  &Bs[wn * 32 + q * 16 + (lane >> 4) * 8 + (lane & 7)][kk * 16 + ((lane >> 3) & 1) * 8]);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        mma_bf16(acc[i][j], af[i], bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
  }
}

// The epilogue. Accumulator (i, j, c): row wm*32 + i*16 + lane/4 (+8 for c >= 2), column
// wn*32 + j*8 + (lane%4)*2 + c%2 of the CTA tile. gate_up: n8 tiles 2q (gate) and 2q+1 (up) cover the same 8
// columns of I; gate and up are rounded to bf16, the activation is computed in fp32 and stored as bf16.
// down: each expert's output row rounded to bf16.
template <bool kGateUp>
__device__ __forceinline__ void store_grouped_tile(const GroupedGemmParams& p, const GroupedTile& t, int n0,
                                                   const GroupedAcc& acc, int wm, int wn, int lane) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * 32 + i * 16 + (lane >> 2) + h * 8;
      if (r >= t.m_valid) continue;
      bf16* out_row = p.out + int64_t(t.seg + t.m0 + r) * p.ldo;
      if constexpr (kGateUp) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int col = n0 + (wn * 2 + q) * 8 + (lane & 3) * 2;
          if (col >= p.n) continue;
          const float v0 = expert_act(p.act, round_bf16(acc[i][2 * q][2 * h]),
                                      round_bf16(acc[i][2 * q + 1][2 * h]), p.beta, p.linear_beta);
          const float v1 = expert_act(p.act, round_bf16(acc[i][2 * q][2 * h + 1]),
                                      round_bf16(acc[i][2 * q + 1][2 * h + 1]), p.beta, p.linear_beta);
          *reinterpret_cast<__nv_bfloat162*>(out_row + col) = __floats2bfloat162_rn(v0, v1);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = n0 + wn * 32 + j * 8 + (lane & 3) * 2;
          if (col >= p.n) continue;
          *reinterpret_cast<__nv_bfloat162*>(out_row + col) =
              __floats2bfloat162_rn(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
        }
      }
    }
  }
}

}  // namespace rill::cuda::moe
