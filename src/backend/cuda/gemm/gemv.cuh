// The decode GEMV's kernel body and its policies (see gemv.cu for the design), shared by its launchers:
// gemv.cu (the plain GEMV and gemm_group, either with an add_rms_norm folded in) and moe/route.cu (the router,
// whose last CTA selects the experts). Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/gemv.h"
#include "backend/cuda/norm_row.cuh"

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

// add_rms_norm folded into the GEMV (the kernel's kNorm): the parts' shared input x is norm(residual + delta).
// Every CTA computes all M rows of it into its shared memory (K bf16 per row), reading residual and delta
// (from L2: every CTA reads the same few KB) with norm_row.cuh's steps on `threads` of its threads — the
// elements per thread and the reduction of add_rms_norm's own launch for this width, so the rows are bit for
// bit what add_rms_norm writes. The last CTA to arrive writes them to `out` and the updated residual back.
// Why the last one: the residual is updated in place, and a CTA that wrote residual + delta while another
// still read the residual would make that one add delta twice. When the last CTA arrives every other CTA has
// finished reading (and the residual needs no second buffer in the model).
struct GemvNorm {
  float* residual;  // [M, K] F32 (the model's residual stream), row stride ldr
  int64_t ldr;
  const __nv_bfloat16* delta;  // [M, K], row stride ldd
  int64_t ldd;
  const float* weight;  // [K]
  float eps;
  __nv_bfloat16* out;  // [M, K] (h: the parts' x, for the op's later readers), row stride ldo
  int64_t ldo;
  int K;
  int threads;  // norm_row_threads(K, 8)
};

struct GemvGroup {
  GemvPart part[backend::kMaxGemmGroup];
  int n_parts;
  GemvNorm norm;  // kNorm only
  // A kernel with a norm or a tail: the arrival counter of its CTAs (CudaContext::gemv_counter, zero between
  // launches) and where the tail's part of the dynamic shared memory starts (after the norm's rows).
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

// A group whose parts differ in format (`--quantization` leaves the 48B's KDA gate projections bf16 beside
// the FP8 q|k|v): each part is read with its own policy, FP8 parts (those with scales) as 16-code chunks. The
// part is the same for every warp of a CTA, so the choice never diverges; the kernel holds both loops.
struct MixedWeights {};

// Calls f with the policy part p is read with: W itself, or for MixedWeights the part's own.
template <class W, class F>
__device__ __forceinline__ void with_policy(const GemvPart& p, F&& f) {
  if constexpr (std::is_same_v<W, MixedWeights>) {
    if (p.scales != nullptr)
      f(Fp8Weights<16>{});
    else
      f(Bf16Weights{});
  } else {
    f(W{});
  }
}

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

constexpr int kNormVec = 8;  // add_rms_norm's vector width on the rows the fused norm takes (gemv_norm_fusable)

// The M normed rows of x into xs ([M, K] bf16), as rms_norm_kernel<8, true, float> computes them.
template <int M>
__device__ __forceinline__ void norm_rows(const GemvNorm& nm, __nv_bfloat16* xs) {
  const int tid = int(threadIdx.x);
  const bool active = tid < nm.threads;  // the others add exact zeros to the block sum
#pragma unroll 1
  for (int m = 0; m < M; ++m) {
    const float* xr = nm.residual + m * nm.ldr;
    const __nv_bfloat16* dr = nm.delta + m * nm.ldd;
    float ss = 0.0f;
    if (active)
      for (int c = tid * kNormVec; c < nm.K; c += nm.threads * kNormVec) {
        float v[kNormVec];
        load_residual<kNormVec, true>(xr, dr, c, v);
        add_squares<kNormVec>(v, ss);
      }
    ss = block_sum(ss);
    const float r = rms_scale(ss, nm.K, nm.eps);
    if (active)
      for (int c = tid * kNormVec; c < nm.K; c += nm.threads * kNormVec) {
        float v[kNormVec];
        load_residual<kNormVec, true>(xr, dr, c, v);
        apply_norm<kNormVec>(v, nm.weight, c, r);
        store_bf16<kNormVec>(xs + m * nm.K + c, v);
      }
  }
  __syncthreads();
}

// The last CTA: out = the normed rows, residual += delta (the same fp32 sums norm_rows used).
template <int M>
__device__ __forceinline__ void write_norm(const GemvNorm& nm, const __nv_bfloat16* xs) {
#pragma unroll 1
  for (int m = 0; m < M; ++m)
    for (int c = int(threadIdx.x) * kNormVec; c < nm.K; c += int(blockDim.x) * kNormVec) {
      float v[kNormVec];
      load_residual<kNormVec, true>(nm.residual + m * nm.ldr, nm.delta + m * nm.ldd, c, v);
      store_row<kNormVec>(nm.residual + m * nm.ldr + c, v);
      *reinterpret_cast<uint4*>(nm.out + m * nm.ldo + c) = *reinterpret_cast<const uint4*>(xs + m * nm.K + c);
    }
}

// x through the read-only cache (global memory), or the normed rows in shared memory (kNorm).
template <bool kShared>
__device__ __forceinline__ uint4 load_x(const uint4* p) {
  if constexpr (kShared) return *p;
  else return __ldg(p);
}

// Warp `part` of a row covers chunks (kElems weights each, of the part's policy) [part * span, (part + 1) *
// span) of it. kNorm: x is g.norm's output, computed by every CTA into its shared memory (GemvNorm). Tail (a
// policy like NoTail): work the last CTA to finish runs once every output of the launch is written — the
// decode router's expert selection (moe/route.cu), on its shared memory from g.tail_smem on.
template <int M, class W, bool kNorm, class Tail>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvGroup g, const Tail tail) {
  extern __shared__ __align__(16) unsigned char gemv_smem[];
  __shared__ float partial[kWarps][M];
  int pi = 0;
  while (pi + 1 < g.n_parts && int(blockIdx.x) >= g.part[pi + 1].first_block) ++pi;
  const GemvPart& p = g.part[pi];
  const int split = p.split, rows = kWarps / split;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = (int(blockIdx.x) - p.first_block) * rows + warp / split, part = warp % split;
  // W is never written during a step, so it may be read before the wait; x and out may not.
  if (n < p.N)
    with_policy<W>(p, [&](auto policy) {
      using P = decltype(policy);
      const int chunks = p.K / P::kElems, span = (chunks + split - 1) / split;
      const int c_begin = part * span, c_end = min(chunks, c_begin + span);
      const char* wrow = static_cast<const char*>(p.w) + int64_t(n) * p.ldw * P::kElemBytes;
      constexpr int kChunksPerLine = 128 / P::kChunkBytes;
      for (int c = c_begin + lane * kChunksPerLine; c < c_end; c += 32 * kChunksPerLine)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(wrow + int64_t(c) * P::kChunkBytes));
    });
  pdl_prologue();
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(gemv_smem);  // kNorm: [M, K]
  if constexpr (kNorm) norm_rows<M>(g.norm, xs);
  const __nv_bfloat16* x = kNorm ? xs : p.x;
  const int64_t ldx = kNorm ? int64_t(p.K) : p.ldx;
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.0f;
  if (n < p.N)
    with_policy<W>(p, [&](auto policy) {
      using P = decltype(policy);
      using Chunk = typename P::Chunk;
      const int chunks = p.K / P::kElems, span = (chunks + split - 1) / split;
      const int c_begin = part * span, c_end = min(chunks, c_begin + span);
      const Chunk* wrow =
          reinterpret_cast<const Chunk*>(static_cast<const char*>(p.w) + int64_t(n) * p.ldw * P::kElemBytes);
      const typename P::Row row(p, n);
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
          float wf[P::kElems];
          row.widen(wv[u], c, wf);
#pragma unroll
          for (int m = 0; m < M; ++m) {
            const uint4* xrow = reinterpret_cast<const uint4*>(x + int64_t(m) * ldx) + c * (P::kElems / 8);
#pragma unroll
            for (int h = 0; h < P::kElems / 8; ++h) {
              float xf[8];
              unpack(load_x<kNorm>(xrow + h), xf);
#pragma unroll
              for (int i = 0; i < 8; ++i) acc[m] = fmaf(wf[8 * h + i], xf[i], acc[m]);
            }
          }
        }
      }
    });
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
  if constexpr (kNorm || Tail::kActive) {
    if (last_cta_to_arrive(g.counter)) {
      if constexpr (kNorm) write_norm<M>(g.norm, xs);
      tail(M, gemv_smem + g.tail_smem);
    }
  }
}

// The launch of a gemv_group_eligible group: its parts, CTAs and rows, the weight policy that reads them
// (Mixed: bf16 and 16-code FP8 parts, MixedWeights), and whether the kernel folds an add_rms_norm in
// (attach_norm).
enum class GemvWeights { Bf16, Fp8x16, Fp8x8, Mixed };
struct GemvPlan {
  GemvGroup g{};
  int blocks = 0, M = 0;
  GemvWeights weights = GemvWeights::Bf16;
  bool norm = false;
};
GemvPlan plan_gemv_group(const backend::GemmGroupArgs& a, int sm_count);
// Folds `n` (gemv_norm_fusable) into `plan`'s launch; returns the dynamic shared memory it takes, where a tail's
// begins (g.tail_smem).
size_t attach_norm(GemvPlan& plan, const backend::AddRmsNormArgs& n, unsigned* counter);

// Launches `plan` with weight policy W (plan.weights) and `tail`; smem: the dynamic shared memory.
template <class W, class Tail>
Status launch_gemv_plan(const char* name, const GemvPlan& plan, const Tail& tail, size_t smem,
                        cudaStream_t stream) {
  if (plan.blocks == 0) return {};
  const LaunchShape shape{dim3(unsigned(plan.blocks)), dim3(kWarps * 32), smem};
  auto run = [&](auto m, auto norm) {  // C++17 (nvcc here): the constants from their types
    return launch(name, shape, stream, gemv_kernel<decltype(m)::value, W, decltype(norm)::value, Tail>, plan.g,
                  tail);
  };
  auto rows = [&](auto norm) {
    switch (plan.M) {
      case 1: return run(std::integral_constant<int, 1>{}, norm);
      case 2: return run(std::integral_constant<int, 2>{}, norm);
      case 3: return run(std::integral_constant<int, 3>{}, norm);
      default: return run(std::integral_constant<int, 4>{}, norm);
    }
  };
  return plan.norm ? rows(std::true_type{}) : rows(std::false_type{});
}

}  // namespace rill::cuda::gemv
