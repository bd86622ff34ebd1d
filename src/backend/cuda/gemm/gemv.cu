// y[m, n] = sum_k x[m, k] W[n, k] for M <= 4 rows of x, for one weight or a group of independent ones in one
// launch (gemm_group: the KDA input projections of a decode step). A CTA of 8 warps computes 8 / S output
// rows of one part with S warps per row, each warp streaming a contiguous 1/S of the row with 16-byte loads
// (four chunks in flight per lane), x read through L1 (it is small and shared by every warp), fp32
// accumulation, a warp reduction, then the S partial sums of a row added in shared memory in a fixed order
// (deterministic). S (1, 2, 4 or 8) is chosen per part on the host so that enough warps stream at once to
// cover HBM latency: one warp per row left the short-N projections (N = 32..2304) on a few SMs with one or
// two loads in flight per lane.
//
// Weight formats are load policies of the one kernel body (style.md §7.10): Bf16Weights reads 8 bf16 weights
// as one 16-byte chunk; Fp8Weights<16> reads 16 E4M3 codes as one 16-byte chunk (half the bytes of a decode
// step's weight stream in the same loads in flight: the 8-byte chunks it read before left the FP8 step as slow
// as bf16's, ncu on the H200: the GEMVs at 0.9-1.2 TB/s) and multiplies them by their block's F32 scale (exact:
// codes widen to fp32 without rounding); Fp8Weights<8> (8-byte chunks) serves rows that are not 16-byte aligned.
//
// Launched with PDL (common/launch.h): before waiting for the kernel that produces x, each warp asks L2 for
// its slice of W (prefetch.global.L2, one request per 128-byte line), so the weight stream of this projection
// overlaps the tail of the norm or GEMV before it instead of starting after it.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common/align.h"
#include "backend/cuda/common/check.h"
#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/gemv.h"

namespace rill::cuda {
namespace {

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

// Warp `part` of a row covers chunks (W::kElems weights each) [part * span, (part + 1) * span) of it.
template <int M, class W>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvGroup g) {
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
    if (part != 0) return;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float v = 0.0f;
      for (int q = 0; q < split; ++q) v += partial[warp + q][m];
      acc[m] = v;
    }
  }
  if (lane == 0 && n < p.N) {
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (p.out_f32)
        static_cast<float*>(p.out)[int64_t(m) * p.ldo + n] = acc[m];
      else
        static_cast<__nv_bfloat16*>(p.out)[int64_t(m) * p.ldo + n] = __float2bfloat16_rn(acc[m]);
    }
  }
}

bool fp8(const backend::GemmArgs& a) { return a.w->format == backend::WeightFormat::Fp8; }

// FP8 rows read as 16-code chunks when every row starts 16-byte aligned and a chunk stays inside one scale block.
bool fp8_wide(const backend::GemmArgs& a) {
  const backend::LinearWeight& w = *a.w;
  const int64_t K = a.x.size(1);
  return K % 16 == 0 && aligned16(w.weight.data) && w.weight.stride(0) % 16 == 0 &&
         (w.block.cols % 16 == 0 || w.block.cols >= K);
}

GemvPart make_part(const backend::GemmArgs& a, int sm_count) {
  GemvPart p{};
  p.x = static_cast<const __nv_bfloat16*>(a.x.data);
  p.ldx = a.x.stride(0);
  p.w = a.w->weight.data;
  p.ldw = a.w->weight.stride(0);
  if (fp8(a)) {
    p.scales = static_cast<const float*>(a.w->scales.data);
    p.lds = a.w->scales.stride(0);
    p.block_rows = a.w->block.rows;
    // Per-channel scales (block.cols = kWholeRow = 2^30): every chunk's column index divides to block 0.
    p.block_cols = int(std::min<int64_t>(a.w->block.cols, int64_t(1) << 30));
  }
  p.out = a.out.data;
  p.ldo = a.out.stride(0);
  p.N = int(a.w->out_features());
  p.K = int(a.x.size(1));
  p.out_f32 = a.out.dtype == DType::F32;
  p.split = gemv_split(p.N, p.K / (fp8(a) && fp8_wide(a) ? 16 : 8), sm_count);
  p.first_block = 0;
  return p;
}

}  // namespace

int gemv_split(int64_t N, int64_t chunks, int sm_count) {
  // Split while the warps still fit one wave of the device at 64 warps per SM (a second, partial wave
  // costs a whole latency round) and every warp keeps at least two 16-byte loads per lane (a warp with a
  // single load spends its life on launch and reduction). Measured with ncu on the 48B decode step: one warp
  // per row left the 32- and 128-row projections at 5.5-6 us; eight warps per row on 2048 rows was slower
  // than one.
  const int64_t wave_warps = int64_t(std::max(sm_count, 1)) * 64;
  int split = 1;
  while (split < kWarps && N * split * 2 <= wave_warps && chunks / (split * 2) >= 64) split *= 2;
  return split;
}

bool gemv_eligible(const backend::GemmArgs& a) {
  const backend::LinearWeight& w = *a.w;
  const int64_t M = a.x.size(0), K = a.x.size(1);
  const bool weight_ok =
      (w.format == backend::WeightFormat::Dense && w.weight.dtype == DType::BF16 && aligned16(w.weight.data)) ||
      (w.format == backend::WeightFormat::Fp8 && w.weight.dtype == DType::F8E4M3 && w.scales.dtype == DType::F32 &&
       (w.block.cols % 8 == 0 || w.block.cols >= K) && (reinterpret_cast<uintptr_t>(w.weight.data) & 7) == 0 &&
       (w.scales.size(1) <= 1 || w.scales.stride(1) == 1));
  return M >= 1 && M <= kGemvMaxRows && weight_ok && a.x.dtype == DType::BF16 &&
         (a.out.dtype == DType::BF16 || a.out.dtype == DType::F32) && K % 8 == 0 &&
         (w.weight.size(1) <= 1 || w.weight.stride(1) == 1) && w.weight.stride(0) % 8 == 0 &&
         (M == 1 || a.x.stride(0) % 8 == 0) && aligned16(a.x.data);
}

bool gemv_group_eligible(const backend::GemmGroupArgs& a) {
  if (a.parts.empty() || int(a.parts.size()) > backend::kMaxGemmGroup) return false;
  for (const backend::GemmArgs& p : a.parts)  // one launch runs one weight policy
    if (!gemv_eligible(p) || p.x.size(0) != a.parts[0].x.size(0) || fp8(p) != fp8(a.parts[0]) ||
        (fp8(p) && fp8_wide(p) != fp8_wide(a.parts[0])))
      return false;
  return true;
}

Status launch_gemv_group(const backend::GemmGroupArgs& a, int sm_count, cudaStream_t stream) {
  GemvGroup g{};
  g.n_parts = int(a.parts.size());
  int blocks = 0;
  for (int i = 0; i < g.n_parts; ++i) {
    g.part[i] = make_part(a.parts[size_t(i)], sm_count);
    g.part[i].first_block = blocks;
    const int rows = kWarps / g.part[i].split;
    blocks += (g.part[i].N + rows - 1) / rows;
  }
  if (blocks == 0) return {};
  const LaunchShape shape{dim3(unsigned(blocks)), dim3(kWarps * 32)};
  auto run = [&](auto policy) -> Status {  // C++17 (nvcc here): the policy type from an argument
    using W = decltype(policy);
    switch (a.parts[0].x.size(0)) {
      case 1: return launch("gemv_kernel", shape, stream, gemv_kernel<1, W>, g);
      case 2: return launch("gemv_kernel", shape, stream, gemv_kernel<2, W>, g);
      case 3: return launch("gemv_kernel", shape, stream, gemv_kernel<3, W>, g);
      default: return launch("gemv_kernel", shape, stream, gemv_kernel<4, W>, g);
    }
  };
  if (!fp8(a.parts[0])) return run(Bf16Weights{});
  return fp8_wide(a.parts[0]) ? run(Fp8Weights<16>{}) : run(Fp8Weights<8>{});
}

Status launch_gemv(const backend::GemmArgs& a, int sm_count, cudaStream_t stream) {
  return launch_gemv_group(backend::GemmGroupArgs{{a}}, sm_count, stream);
}

}  // namespace rill::cuda
