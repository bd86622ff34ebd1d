// Weights into L2 ahead of their kernels (Backend::prefetch_weights; backend option weight_prefetch, off: on
// the H100 it made the FP8 48B's graphed batch-1 step 3.98 ms instead of 2.87, cuda_backend_options.h). A
// decode step reads ~3.7 GB of weights in ~400 short kernels (FP8 48B, batch 1), each starting its weight
// stream only when it starts (its PDL prologue reaches one kernel ahead: gemm/gemv.cu), so DRAM idles in
// every kernel's ramp and tail. The model names the next sublayer's dense weights while the current one runs
// (the next layer's attention projections during this layer's MoE, this layer's router and shared expert
// during its attention); this kernel asks L2 for them with Hopper's bulk prefetch (cp.async.bulk.prefetch.L2:
// one instruction per 16 KiB piece, no registers or shared memory held, nothing waited for), spread over one
// 32-thread CTA per SM so the requests leave from every SM's copy engine. The readers stream their weights
// with evict-first loads (__ldcs), so that the lines brought in here outlive the expert weights passing
// through L2 meanwhile.
//
// PDL (common/launch.h): the CTAs release the next kernel first (it need not wait for hints) and only then
// issue the prefetches, which therefore overlap the kernel before this one; each CTA ends with pdl_wait(), so
// this grid completes after the kernel before it and the next kernel's wait still covers that kernel's
// writes.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/launch.h"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/gemm/gemv.h"
#include "backend/cuda/weight_prefetch.h"

namespace rill::cuda {
namespace {

constexpr int kMaxRanges = backend::PrefetchWeightsArgs::kMaxTensors;
constexpr uint64_t kPieceBytes = 16 << 10;  // one bulk prefetch

struct PrefetchRanges {
  const char* base[kMaxRanges];  // 16-byte aligned
  uint64_t bytes[kMaxRanges];    // multiples of 16
  int n;
};

__global__ void __launch_bounds__(32) weight_prefetch_kernel(const PrefetchRanges r) {
  pdl_launch_dependents();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint64_t lane = uint64_t(blockIdx.x) * 32 + threadIdx.x, lanes = uint64_t(gridDim.x) * 32;
  uint64_t first = 0;  // the range's first piece in the numbering over all ranges
  for (int i = 0; i < r.n; ++i) {
    const uint64_t pieces = (r.bytes[i] + kPieceBytes - 1) / kPieceBytes;
    // Piece q of the concatenation goes to lane q % lanes.
    for (uint64_t q = first + (lane + lanes - first % lanes) % lanes; q < first + pieces; q += lanes) {
      const uint64_t off = (q - first) * kPieceBytes;
      const uint64_t left = r.bytes[i] - off;
      const uint32_t size = uint32_t(left < kPieceBytes ? left : kPieceBytes);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.base[i] + off), "r"(size) : "memory");
    }
    first += pieces;
  }
#endif
  pdl_wait();
}

// The bytes a view spans, from its first element to one past its last.
uint64_t extent_bytes(const TensorView& t) {
  int64_t last = 0;
  for (int d = 0; d < t.rank(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return uint64_t(last + 1) * dtype_size(t.dtype);
}

}  // namespace

bool weight_prefetch_wanted(int64_t tokens, const CudaContext& cx) {
  return cx.options.weight_prefetch && cx.cc_major >= 9 && tokens > 0 && tokens <= kGemvMaxRows;
}

Status launch_weight_prefetch(const backend::PrefetchWeightsArgs& a, const CudaContext& cx) {
  if (!weight_prefetch_wanted(a.tokens, cx)) return {};
  PrefetchRanges r{};
  for (int i = 0; i < a.n; ++i) {
    // Whole 16-byte units inside the view (the bulk prefetch's alignment); a sub-16-byte view is skipped.
    const uintptr_t begin = reinterpret_cast<uintptr_t>(a.tensors[i].data);
    const uintptr_t lo = (begin + 15) & ~uintptr_t(15),
                    hi = (begin + extent_bytes(a.tensors[i])) & ~uintptr_t(15);
    if (hi <= lo) continue;
    r.base[r.n] = reinterpret_cast<const char*>(lo);
    r.bytes[r.n] = hi - lo;
    ++r.n;
  }
  if (r.n == 0) return {};
  const LaunchShape shape{dim3(unsigned(std::max(cx.sm_count, 1))), dim3(32)};
  return launch("weight_prefetch", shape, cx.stream, weight_prefetch_kernel, r);
}

}  // namespace rill::cuda
