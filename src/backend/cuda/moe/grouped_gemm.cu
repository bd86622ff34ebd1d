// Grouped expert GEMMs for the prefill path: out[slot, :] = a[row(slot), :] . W_e^T for the slots of each
// expert e (the plan kernel grouped the (token, expert) pairs by expert). The grid has a fixed upper bound of
// 64-slot tiles; each CTA finds its expert from the device tile offsets (binary search) and exits when past
// the last tile, so the launch shape never depends on device data (graph-capturable, no host sync).
//
// Tensor cores through mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix from padded shared memory,
// 3-stage cp.async pipeline (zero-fill for rows past the expert's slots, columns past n and k past K).
// gate_up: the epilogue rounds gate and up to bf16, applies SiLU/SiTU in fp32 and stores bf16 activations.
// down: the epilogue stores each expert's output rounded to bf16 (combined later in fp32, in a fixed order).
// A first version: no warp specialisation or wgmma; expected well under the cuBLAS rate (see bench/kernels).
#include <cuda_bf16.h>

#include "backend/cuda/common/check.h"
#include "backend/cuda/moe/grouped_tile.cuh"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {
namespace {

template <bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads) grouped_gemm_kernel(const GroupedGemmParams p) {
  __shared__ __align__(16) bf16 As[kStages][kBM][kLds];
  __shared__ __align__(16) bf16 Bs[kStages][kBN][kLds];
  GroupedTile t;
  if (!locate_tile(p, blockIdx.y, t)) return;
  const int n0 = blockIdx.x * (kGateUp ? kGateUpCols : kBN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
  // Loader: A is 64 rows x 4 chunks of 8 bf16 (one chunk per thread), B 128 rows x 4 chunks (two per thread).
  const int ld_row = tid >> 2, ld_col = (tid & 3) * 8;
  const bf16* a_src = a_tile_row(p, t, ld_row);
  const bf16* w_e = p.w + int64_t(t.e) * p.w_expert_stride;
  const bf16* b_src[2];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    int col;
    const int src_row = b_tile_row<kGateUp>(ld_row + q * 64, n0, p.n, col);
    b_src[q] = col < p.n ? w_e + int64_t(src_row) * p.ldw : nullptr;
  }
  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK + ld_col;
    const bool ka = a_src && k0 < p.k;
    cp_async16(&As[stage][ld_row][ld_col], ka ? a_src + k0 : p.a, ka);
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const bool kb = b_src[q] && k0 < p.k;
      cp_async16(&Bs[stage][ld_row + q * 64][ld_col], kb ? b_src[q] + k0 : p.w, kb);
    }
  };

  GroupedAcc acc;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

  const int k_tiles = (p.k + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();  // empty groups keep the group count uniform
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();  // tile kt has landed (for this thread) ...
    __syncthreads();               // ... for all threads, and the stage refilled below is no longer read
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();
    const int st = kt % kStages;
    mma_k_tile(acc, As[st], Bs[st], wm, wn, lane);
  }
  cp_async_wait<0>();
  store_grouped_tile<kGateUp>(p, t, n0, acc, wm, wn, lane);
}

}  // namespace

Status launch_grouped_gate_up(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0) return {};
  const dim3 grid(unsigned((p.n + kGateUpCols - 1) / kGateUpCols), unsigned(max_tiles));
  grouped_gemm_kernel<true><<<grid, kGemmThreads, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("moe_grouped_gate_up");
  return {};
}

Status launch_grouped_down(const GroupedGemmParams& p, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0) return {};
  const dim3 grid(unsigned((p.n + kBN - 1) / kBN), unsigned(max_tiles));
  grouped_gemm_kernel<false><<<grid, kGemmThreads, 0, stream>>>(p);
  RILL_CUDA_CHECK_LAUNCH("moe_grouped_down");
  return {};
}

}  // namespace rill::cuda::moe
