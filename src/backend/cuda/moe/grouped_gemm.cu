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
#include "backend/cuda/moe/device.cuh"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {
namespace {

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;  // 0: fill the 16 bytes with zeros, read nothing
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool kGateUp>
__global__ void __launch_bounds__(kGemmThreads) grouped_gemm_kernel(const GroupedGemmParams p) {
  __shared__ __align__(16) bf16 As[kStages][kBM][kLds];
  __shared__ __align__(16) bf16 Bs[kStages][kBN][kLds];
  const int tile = blockIdx.y;
  if (tile >= p.tile_offsets[p.n_experts]) return;
  int lo = 0,
      hi = p.n_experts - 1;  // the last expert whose first tile is <= tile (skips experts without tiles)
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.tile_offsets[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int e = lo;
  const int seg = p.expert_offsets[e];
  const int m0 = (tile - p.tile_offsets[e]) * kBM;
  const int m_valid = min(kBM, p.expert_offsets[e + 1] - seg - m0);
  const int n0 = blockIdx.x * (kGateUp ? kGateUpCols : kBN);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
  // Loader: A is 64 rows x 4 chunks of 8 bf16 (one chunk per thread), B 128 rows x 4 chunks (two per thread).
  const int ld_row = tid >> 2, ld_col = (tid & 3) * 8;
  const bf16* a_src = nullptr;
  if (ld_row < m_valid) {
    const int slot = seg + m0 + ld_row;
    const int64_t r = p.slot_row ? p.slot_row[slot] : slot;
    a_src = p.a + r * p.lda;
  }
  const bf16* w_e = p.w + int64_t(e) * p.w_expert_stride;
  const bf16* b_src[2];
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int r = ld_row + q * 64;
    int col, src_row;
    if constexpr (kGateUp) {  // 8-row blocks alternate gate (rows [0, I)) and up (rows [I, 2I))
      const int blk = r >> 3;
      col = n0 + (blk >> 1) * 8 + (r & 7);
      src_row = (blk & 1 ? p.n : 0) + col;
    } else {
      col = src_row = n0 + r;
    }
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

  float acc[2][4][4];
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
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      unsigned af[2][4], bf[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        ldmatrix_x4(af[i], &As[st][wm * 32 + i * 16 + (lane & 15)][kk * 16 + (lane >> 4) * 8]);
#pragma unroll
      for (int q = 0; q < 2; ++q)
        ldmatrix_x4(
            bf[q], &Bs[st][wn * 32 + q * 16 + (lane >> 4) * 8 + (lane & 7)][kk * 16 + ((lane >> 3) & 1) * 8]);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mma_bf16(acc[i][j], af[i], bf[j >> 1][(j & 1) * 2], bf[j >> 1][(j & 1) * 2 + 1]);
    }
  }
  cp_async_wait<0>();

  // Accumulator (i, j, c): row wm*32 + i*16 + lane/4 (+8 for c >= 2),
  // column wn*32 + j*8 + (lane%4)*2 + c%2.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm * 32 + i * 16 + (lane >> 2) + h * 8;
      if (r >= m_valid) continue;
      bf16* out_row = p.out + int64_t(seg + m0 + r) * p.ldo;
      if constexpr (kGateUp) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {  // n8 tiles 2q (gate) and 2q+1 (up) cover the same 8 columns of I
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
