// Per-head batched GEMM for the absorbed decode path: q_lat = W_UK,h^T q_nope (B stored K x N) and
// out_h = W_UV,h lat (B stored N x K). 64x64x32 tiles, 4 warps of 32x32, bf16 mma.sync with fp32
// accumulation, 2-stage cp.async; grid (N/64, M/64, heads). Optional row maps gather A rows / scatter C rows.
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/mla/device.cuh"
#include "backend/cuda/mla/phases.h"

namespace rill::cuda::mla {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
constexpr int kLdA = kBK + 8;

template <bool kBKn>
__global__ void __launch_bounds__(kThreads) head_gemm_kernel(const HeadGemmParams p) {
  pdl_prologue();
  constexpr int kBRows = kBKn ? kBK : kBN;
  constexpr int kLdB = kBKn ? kBN + 8 : kBK + 8;
  __shared__ __align__(16) bf16 sa[2][kBM * kLdA];
  __shared__ __align__(16) bf16 sb[2][kBRows * kLdB];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 1, wn = warp & 1;
  const int h = blockIdx.z, m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;

  // A: 64 rows x 4 chunks of 8; this thread copies rows (tid >> 2) and +32, chunk tid & 3.
  const bf16* a_src[2];
  bool a_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int m = m0 + (tid >> 2) + 32 * i;
    a_ok[i] = m < p.m;
    const int64_t row = a_ok[i] ? (p.a_rows ? p.a_rows[m] : m) : 0;
    a_src[i] = p.a + row * p.a_row + int64_t(h) * p.a_head + (tid & 3) * 8;
  }
  const bf16* b_head = p.b + int64_t(h) * p.b_head;
  auto load = [&](int stage, int k0) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
      cp_async16(&sa[stage][((tid >> 2) + 32 * i) * kLdA + (tid & 3) * 8], a_ok[i] ? a_src[i] + k0 : p.a,
                 a_ok[i]);
    if constexpr (kBKn) {  // 32 k-rows x 8 chunks of n
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = (tid >> 3) + 16 * i, c = tid & 7;
        cp_async16(&sb[stage][r * kLdB + c * 8], b_head + int64_t(k0 + r) * p.b_ld + n0 + c * 8, true);
      }
    } else {  // 64 n-rows x 4 chunks of k
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = (tid >> 2) + 32 * i, c = tid & 3;
        cp_async16(&sb[stage][r * kLdB + c * 8], b_head + int64_t(n0 + r) * p.b_ld + k0 + c * 8, true);
      }
    }
  };

  float acc[2][4][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  const int n_k = p.k / kBK;
  load(0, 0);
  cp_async_commit();
  for (int kt = 0; kt < n_k; ++kt) {
    const int st = kt & 1;
    if (kt + 1 < n_k) {
      load(st ^ 1, (kt + 1) * kBK);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        ldsm_x4(af[mt], &sa[st][(wm * 32 + mt * 16 + lm_a_row(lane)) * kLdA + ks * 16 + lm_a_col(lane)]);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t bfr[4];
        if constexpr (kBKn)
          ldsm_x4_trans(bfr,
                        &sb[st][(ks * 16 + lm_bkn_row(lane)) * kLdB + wn * 32 + np * 16 + lm_bkn_col(lane)]);
        else
          ldsm_x4(bfr, &sb[st][(wn * 32 + np * 16 + lm_bnk_row(lane)) * kLdB + ks * 16 + lm_bnk_col(lane)]);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          mma_bf16(acc[mt][2 * np], af[mt], bfr[0], bfr[1]);
          mma_bf16(acc[mt][2 * np + 1], af[mt], bfr[2], bfr[3]);
        }
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this stage
  }

  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + wm * 32 + mt * 16 + g + half * 8;
      if (m >= p.m) continue;
      const int64_t row = p.c_rows ? p.c_rows[m] : m;
      bf16* dst = p.c + row * p.c_row + int64_t(h) * p.c_head + n0 + wn * 32 + 2 * t4;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        *reinterpret_cast<uint32_t*>(dst + nt * 8) =
            pack_bf16(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
    }
}

}  // namespace

Status launch_head_gemm(const HeadGemmParams& p, bool b_is_kn, int n_heads, cudaStream_t stream) {
  if (p.m == 0) return {};
  if (p.n % kBN != 0 || p.k % kBK != 0)
    return internal_error("mla head gemm: N {} and K {} must be multiples of {} and {}", p.n, p.k, kBN, kBK);
  const dim3 grid(p.n / kBN, (p.m + kBM - 1) / kBM, n_heads);
  return launch("mla_head_gemm", {grid, dim3(kThreads)}, stream,
                b_is_kn ? head_gemm_kernel<true> : head_gemm_kernel<false>, p);
}

}  // namespace rill::cuda::mla
