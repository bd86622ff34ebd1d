// The decode GEMV's kernel body and its policies (see gemv.cu for the design), shared by the launchers that
// run work after it in the same launch: gemv.cu (the plain GEMV and gemm_group) and moe/route.cu (the router,
// whose last CTA selects the experts). Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/gemv.h"

namespace rill::cuda::gemv {

constexpr int kWarps = 8;
constexpr int kUnroll = 4;

struct GemvPart {
  const __nv_bfloat16* x;  // [M, K], row stride ldx
  int64_t ldx;
  const void* w;  // [N, K] bf16 or F8E4M3 (the kernel's policy), row stride ldw elements
  int64_t ldw;
  const float* scales;  // FP8 only: F32 [ceil(N / block_rows), ceil(K / block_cols)], row stride lds
  int64_t lds;
  int block_rows, block_cols;  // FP8 only; block_cols a multiple of 8 (a chunk never spans two blocks)
  void* out;  // [M, N] bf16 or f32, row stride ldo
  int64_t ldo;
  int N, K;
  int split;        // warps per output row
  int first_block;  // the part's first CTA
  bool out_f32;
};

struct GemvGroup {
  GemvPart part[backend::kMaxGemmGroup];
  int n_parts;
  // A kernel with a tail (Tail::kActive): the arrival counter of its CTAs (CudaContext::gemv_counter, zero
  // between launches) and where the tail's part of the dynamic shared memory starts.
  unsigned* counter;
  int tail_smem;
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

struct Bf16Weights {
  using Chunk = uint4;  // 8 bf16
  static constexpr int kChunkBytes = 16;
  static constexpr int kElemBytes = 2;
  static constexpr int kElems = 8;  // weights per chunk
  struct Row {
    __device__ Row(const GemvPart&, int) {}
    __device__ void widen(const Chunk& u, int, float f[kElems]) const { unpack(u, f); }
  };
};

template <int kCodes>  // 16: one 16-byte chunk; 8: one 8-byte chunk
struct Fp8Weights {
  using Chunk = std::conditional_t<kCodes == 16, uint4, uint2>;
  static constexpr int kChunkBytes = kCodes;
  static constexpr int kElemBytes = 1;
  static constexpr int kElems = kCodes;
  struct Row {  // the scales of output row n
    const float* scales;
    int block_cols;
    __device__ Row(const GemvPart& p, int n)
        : scales(p.scales + int64_t(n / p.block_rows) * p.lds), block_cols(p.block_cols) {}
    __device__ void widen(const Chunk& u, int chunk, float f[kElems]) const {
      const float s = __ldg(scales + (chunk * kElems) / block_cols);  // a chunk never spans two blocks
      const __nv_fp8x2_storage_t* q = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
      for (int i = 0; i < kElems / 2; ++i) {
        const float2 t = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(q[i], __NV_E4M3)));
        f[2 * i] = t.x * s;
        f[2 * i + 1] = t.y * s;
      }
    }
  };
};

// The plain GEMV: nothing runs after the outputs are written.
struct NoTail {
  static constexpr bool kActive = false;
  __device__ void operator()(int /*M*/, unsigned char* /*smem*/) const {}
};

// Whether this CTA is the last of the grid to arrive here. Every thread fences its writes before the
// arrival, so the last CTA sees every CTA's outputs; it resets the counter for the next launch (or graph
// replay): no other CTA of this launch touches it again, and the next launch's CTAs only arrive after this
// grid has completed (PDL waits for completion, common/pdl.cuh).
__device__ __forceinline__ bool last_cta_to_arrive(unsigned* counter) {
  __shared__ unsigned arrived;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) arrived = atomicAdd(counter, 1u);
  __syncthreads();
  if (arrived != gridDim.x - 1) return false;
  __threadfence();
  if (threadIdx.x == 0) atomicExch(counter, 0u);
  return true;
}

// Warp `part` of a row covers chunks (W::kElems weights each) [part * span, (part + 1) * span) of it.
// Tail (a policy like NoTail): work the last CTA to finish runs once every output of the launch is written —
// the decode router's expert selection (moe/route.cu), on its shared memory from g.tail_smem on.
template <int M, class W, class Tail>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvGroup g, const Tail tail) {
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  __shared__ float partial[kWarps][M];
  int pi = 0;
  while (pi + 1 < g.n_parts && int(blockIdx.x) >= g.part[pi + 1].first_block) ++pi;
  const GemvPart& p = g.part[pi];
  const int split = p.split, rows = kWarps / split;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = (int(blockIdx.x) - p.first_block) * rows + warp / split, part = warp % split;
  const int chunks = p.K / W::kElems;
  const int span = (chunks + split - 1) / split;
  const int c_begin = part * span, c_end = min(chunks, c_begin + span);
  // W is never written during a step, so it may be read before the wait; x and out may not.
  if (n < p.N) {
    const char* wrow = static_cast<const char*>(p.w) + int64_t(n) * p.ldw * W::kElemBytes;
    constexpr int kChunksPerLine = 128 / W::kChunkBytes;
    for (int c = c_begin + lane * kChunksPerLine; c < c_end; c += 32 * kChunksPerLine)
      asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow + int64_t(c) * W::kChunkBytes));
  }
  pdl_prologue();
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  if (n < p.N) {
    using Chunk = typename W::Chunk;
    const Chunk* wrow = reinterpret_cast<const Chunk*>(static_cast<const char*>(p.w) + int64_t(n) * p.ldw * W::kElemBytes);
    const typename W::Row row(p, n);
    for (int c0 = c_begin + lane; c0 < c_end; c0 += 32 * kUnroll) {
      Chunk wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * 32;
        wv[u] = c < c_end ? __ldcs(wrow + c) : Chunk{};  // streamed: read once
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + u * 32;
        if (c >= c_end) break;
        float wf[W::kElems];
        row.widen(wv[u], c, wf);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4* xrow = reinterpret_cast<const uint4*>(p.x + int64_t(m) * p.ldx) + c * (W::kElems / 8);
#pragma unroll
          for (int h = 0; h < W::kElems / 8; ++h) {
            float xf[8];
            unpack(__ldg(xrow + h), xf);
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[m] = fmaf(wf[8 * h + i], xf[i], acc[m]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
  }
  if (split > 1) {
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < M; ++m) partial[warp][m] = acc[m];
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float v = 0.0f;
        for (int q = 0; q < split; ++q) v += partial[warp + q][m];
        acc[m] = v;
      }
    }
  }
  if (part == 0 && lane == 0 && n < p.N) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (p.out_f32)
        static_cast<float*>(p.out)[int64_t(m) * p.ldo + n] = acc[m];
      else
        static_cast<__nv_bfloat16*>(p.out)[int64_t(m) * p.ldo + n] = __float2bfloat16_rn(acc[m]);
    }
  }
  if constexpr (Tail::kActive) {
    if (last_cta_to_arrive(g.counter)) tail(M, gemv_smem + g.tail_smem);
  }
}

// The launch of a gemv_group_eligible group: its parts, CTAs and rows, and the weight policy that reads them.
enum class GemvWeights { Bf16, Fp8x16, Fp8x8 };
struct GemvPlan {
  GemvGroup g{};
  int blocks = 0, M = 0;
  GemvWeights weights = GemvWeights::Bf16;
};
GemvPlan plan_gemv_group(const backend::GemmGroupArgs& a, int sm_count);

// Launches `plan` with weight policy W (plan.weights) and `tail`; smem: the dynamic shared memory.
template <class W, class Tail>
Status launch_gemv_plan(const char* name, const GemvPlan& plan, const Tail& tail, size_t smem,
                        cudaStream_t stream) {
  if (plan.blocks == 0) return {};
  const LaunchShape shape{dim3(unsigned(plan.blocks)), dim3(kWarps * 32), smem};
  switch (plan.M) {
    case 1: return launch(name, shape, stream, gemv_kernel<1, W, Tail>, plan.g, tail);
    case 2: return launch(name, shape, stream, gemv_kernel<2, W, Tail>, plan.g, tail);
    case 3: return launch(name, shape, stream, gemv_kernel<3, W, Tail>, plan.g, tail);
    default: return launch(name, shape, stream, gemv_kernel<4, W, Tail>, plan.g, tail);
  }
}

}  // namespace rill::cuda::gemv
