// FP8 block quantization (fp8_quantize.h). One CTA per scale block: it reduces the block's amax, then writes
// the codes of the values divided by amax / 448 (IEEE divisions, __fdiv_rn, as the CPU's; the E4M3 conversion
// rounds to nearest even and saturates at +-448 like core/dtype.h f32_to_f8e4m3, NaN to 0x7f). The second pass
// rereads the block from L1/L2. A load-time op: memory-bound and run once per matrix, so kept simple (scalar
// loads; 128 x 128 blocks are 32 KB of bf16 per CTA).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/device_math.cuh"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/fp8_quantize.h"

namespace rill::cuda {
namespace {

constexpr int kThreads = 256;

struct QuantizeParams {
  const void* src;  // [rows, cols], contiguous rows
  uint8_t* codes;   // [rows, cols]
  float* scales;    // [scale_rows, scale_cols]
  int64_t rows, cols;
  int64_t block_rows, block_cols;  // block_cols clamped to cols
  int64_t scale_rows, scale_cols;
};

__device__ __forceinline__ float load_value(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load_value(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ float load_value(const float* p, int64_t i) { return p[i]; }

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? partial[lane] : 0.0f;
  return warp_max(v);
}

// Grid (scale columns, min(scale rows, 65535)): a CTA walks block rows blockIdx.y, + gridDim.y, ...
// (per-channel scales of a tall stack have one block row per matrix row).
template <typename T>
__global__ void __launch_bounds__(kThreads) quantize_fp8_kernel(const QuantizeParams p) {
  pdl_prologue();
  const T* src = static_cast<const T*>(p.src);
  const int64_t bcol = blockIdx.x, c0 = bcol * p.block_cols, nc = min(p.block_cols, p.cols - c0);
  for (int64_t br = blockIdx.y; br < p.scale_rows; br += gridDim.y) {
    const int64_t r0 = br * p.block_rows, nr = min(p.block_rows, p.rows - r0);
    const int64_t n = nr * nc;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const int64_t r = r0 + i / nc, c = c0 + i % nc;
      amax = fmaxf(amax, fabsf(load_value(src, r * p.cols + c)));  // fmaxf drops a NaN, as std::max does here
    }
    amax = block_max(amax);
    const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
    if (threadIdx.x == 0) p.scales[br * p.scale_cols + bcol] = scale;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const int64_t r = r0 + i / nc, c = c0 + i % nc;
      const float q = __fdiv_rn(load_value(src, r * p.cols + c), scale);
      p.codes[r * p.cols + c] = uint8_t(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
    }
    __syncthreads();  // block_max's partials are read before the next block row writes them
  }
}

}  // namespace

Status launch_quantize_fp8(const backend::QuantizeFp8Args& a, cudaStream_t stream) {
  QuantizeParams p{};
  p.src = a.src.data;
  p.codes = static_cast<uint8_t*>(a.codes.data);
  p.scales = a.scales.ptr<float>();
  p.rows = a.src.size(0);
  p.cols = a.src.size(1);
  p.block_rows = a.block.rows;
  p.block_cols = a.block.cols < p.cols ? a.block.cols : p.cols;
  p.scale_cols = a.block.scale_cols(p.cols);
  p.scale_rows = a.block.scale_rows(p.rows);
  if (p.scale_cols > 65535)
    return invalid_argument("quantize_fp8: {} block columns (the CUDA kernel takes up to 65535)",
                            p.scale_cols);
  const LaunchShape shape{dim3(unsigned(p.scale_cols), unsigned(std::min<int64_t>(p.scale_rows, 65535))),
                          dim3(kThreads)};
  switch (a.src.dtype) {
    case DType::BF16: return launch("quantize_fp8", shape, stream, quantize_fp8_kernel<__nv_bfloat16>, p);
    case DType::F16: return launch("quantize_fp8", shape, stream, quantize_fp8_kernel<__half>, p);
    case DType::F32: return launch("quantize_fp8", shape, stream, quantize_fp8_kernel<float>, p);
    default: return invalid_argument("quantize_fp8: source {}", a.src.describe());
  }
}

}  // namespace rill::cuda
