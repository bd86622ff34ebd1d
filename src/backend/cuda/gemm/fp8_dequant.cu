// FP8 weight -> bf16 copy (fp8_dequant.h). Grid-stride over 8-code chunks (8-byte loads, 16-byte stores) when
// K, the row stride and the base allow, else over single codes. The copy lives in scratch an earlier kernel
// may still read, so every CTA waits (pdl_prologue) before its first store; the weight itself is never
// written during a step.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/fp8_dequant.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond: ~16 chunks per thread on the 48B's largest matrix

struct DequantParams {
  const uint8_t* w;  // [N, K] E4M3 codes, row stride ldw
  int64_t ldw;
  const float* scales;  // [ceil(N / block_rows), ceil(K / block_cols)], row stride lds
  int64_t lds;
  int block_rows, block_cols;  // per-channel: block_cols = 2^30
  int N, K;
  __nv_bfloat16* out;  // [N, K] contiguous
};

__device__ __forceinline__ float e4m3_to_float(uint8_t c) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) fp8_dequant_kernel(const DequantParams p) {
  pdl_prologue();
  const int64_t per_row = kVec ? p.K / 8 : p.K;
  const int64_t total = int64_t(p.N) * per_row;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kThreads) {
    const int n = int(i / per_row);
    const int c = int(i - int64_t(n) * per_row);
    const float* srow = p.scales + int64_t(n / p.block_rows) * p.lds;
    if constexpr (kVec) {
      const int k0 = c * 8;
      const float s = __ldg(srow + k0 / p.block_cols);
      const uint2 u = __ldcs(reinterpret_cast<const uint2*>(p.w + int64_t(n) * p.ldw + k0));
      const uint32_t words[2] = {u.x, u.y};
      uint32_t o[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const __nv_fp8x2_storage_t pair = __nv_fp8x2_storage_t(words[q >> 1] >> (16 * (q & 1)));
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
        const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * s, f.y * s);
        o[q] = *reinterpret_cast<const uint32_t*>(&b);
      }
      *reinterpret_cast<uint4*>(p.out + int64_t(n) * p.K + k0) = make_uint4(o[0], o[1], o[2], o[3]);
    } else {
      const float s = __ldg(srow + c / p.block_cols);
      p.out[int64_t(n) * p.K + c] = __float2bfloat16_rn(e4m3_to_float(p.w[int64_t(n) * p.ldw + c]) * s);
    }
  }
}

}  // namespace

size_t fp8_dequant_bytes(const backend::LinearWeight& w) {
  return align256(size_t(w.out_features()) * size_t(w.in_features()) * 2);
}

Status launch_fp8_dequant_bf16(const backend::LinearWeight& w, void* out, cudaStream_t stream) {
  DequantParams p{};
  p.w = static_cast<const uint8_t*>(w.weight.data);
  p.ldw = w.weight.stride(0);
  p.scales = static_cast<const float*>(w.scales.data);
  p.lds = w.scales.stride(0);
  p.block_rows = w.block.rows;
  p.block_cols = int(std::min<int64_t>(w.block.cols, int64_t(1) << 30));
  p.N = int(w.out_features());
  p.K = int(w.in_features());
  p.out = static_cast<__nv_bfloat16*>(out);
  if (p.N == 0 || p.K == 0) return {};
  if (p.block_rows <= 0 || p.block_cols <= 0)
    return invalid_argument("fp8_dequant: scale blocks of {} x {}", p.block_rows, p.block_cols);
  if (w.scales.size(1) > 1 && w.scales.stride(1) != 1)
    return invalid_argument("fp8_dequant: scale rows must be contiguous, got {}", w.scales.describe());
  const bool vec = p.K % 8 == 0 && p.ldw % 8 == 0 && (reinterpret_cast<uintptr_t>(p.w) & 7) == 0 &&
                   aligned16(out) &&
                   (p.block_cols % 8 == 0 || p.block_cols >= p.K);
  const int64_t work = int64_t(p.N) * (vec ? p.K / 8 : p.K);
  const dim3 grid(unsigned(std::min<int64_t>((work + kThreads - 1) / kThreads, kMaxBlocks)));
  return vec ? launch("fp8_dequant_bf16", {grid, dim3(kThreads), 0}, stream, fp8_dequant_kernel<true>, p)
             : launch("fp8_dequant_bf16", {grid, dim3(kThreads), 0}, stream, fp8_dequant_kernel<false>, p);
}

}  // namespace rill::cuda
