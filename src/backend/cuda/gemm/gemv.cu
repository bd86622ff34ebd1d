// y[m, n] = sum_k x[m, k] W[n, k] for M <= 4 rows of x: one warp per output row n, lanes stride the row with
// 16-byte loads (8 bf16), four chunks in flight per lane, x read through L1 (it is small and shared by every
// warp), fp32 accumulation, a warp reduction per row of x.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common/check.h"
#include "backend/cuda/gemm/gemv.h"

namespace rill::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

struct GemvParams {
  const __nv_bfloat16* x;  // [M, K], row stride ldx
  int64_t ldx;
  const __nv_bfloat16* w;  // [N, K], row stride ldw
  int64_t ldw;
  void* out;               // [M, N] bf16 or f32, row stride ldo
  int64_t ldo;
  int M, N, K;
  bool out_f32;
};

__device__ __forceinline__ void unpack(const uint4& u, float f[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

template <int M>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const uint4* wrow = reinterpret_cast<const uint4*>(p.w + int64_t(n) * p.ldw);
  const int chunks = p.K / 8;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  for (int c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * 32;
      wv[u] = c < chunks ? __ldcs(wrow + c) : make_uint4(0, 0, 0, 0);  // streamed: read once
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * 32;
      if (c >= chunks) break;
      float wf[8];
      unpack(wv[u], wf);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xf[8];
        unpack(__ldg(reinterpret_cast<const uint4*>(p.x + int64_t(m) * p.ldx) + c), xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[m] = fmaf(wf[i], xf[i], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) {
      if (p.out_f32) static_cast<float*>(p.out)[int64_t(m) * p.ldo + n] = v;
      else static_cast<__nv_bfloat16*>(p.out)[int64_t(m) * p.ldo + n] = __float2bfloat16_rn(v);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool gemv_eligible(const backend::GemmArgs& a) {
  const backend::LinearWeight& w = *a.w;
  const int64_t M = a.x.size(0), K = a.x.size(1);
  return M >= 1 && M <= kGemvMaxRows && w.format == backend::WeightFormat::Dense && w.weight.dtype == DType::BF16 &&
         a.x.dtype == DType::BF16 && (a.out.dtype == DType::BF16 || a.out.dtype == DType::F32) && K % 8 == 0 &&
         (w.weight.size(1) <= 1 || w.weight.stride(1) == 1) && w.weight.stride(0) % 8 == 0 &&
         (M == 1 || a.x.stride(0) % 8 == 0) && aligned16(w.weight.data) && aligned16(a.x.data);
}

Status launch_gemv(const backend::GemmArgs& a, cudaStream_t stream) {
  GemvParams p;
  p.x = static_cast<const __nv_bfloat16*>(a.x.data);
  p.ldx = a.x.stride(0);
  p.w = static_cast<const __nv_bfloat16*>(a.w->weight.data);
  p.ldw = a.w->weight.stride(0);
  p.out = a.out.data;
  p.ldo = a.out.stride(0);
  p.M = int(a.x.size(0));
  p.N = int(a.w->out_features());
  p.K = int(a.x.size(1));
  p.out_f32 = a.out.dtype == DType::F32;
  const unsigned grid = unsigned((p.N + kWarps - 1) / kWarps);
  switch (p.M) {
    case 1: gemv_kernel<1><<<grid, kWarps * 32, 0, stream>>>(p); break;
    case 2: gemv_kernel<2><<<grid, kWarps * 32, 0, stream>>>(p); break;
    case 3: gemv_kernel<3><<<grid, kWarps * 32, 0, stream>>>(p); break;
    default: gemv_kernel<4><<<grid, kWarps * 32, 0, stream>>>(p); break;
  }
  RILL_CUDA_CHECK_LAUNCH("gemv_kernel");
  return {};
}

}  // namespace rill::cuda
