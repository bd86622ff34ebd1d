#include "backend/cuda/comm/rank_sum.h"

#include <cuda_bf16.h>

#include "backend/cuda/common/check.h"

namespace rill::cuda {
namespace {

template <bool kBf16>
__global__ void rank_sum_kernel(RankSumParams p) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < p.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = p.offset + i;
    float acc;
    if constexpr (kBf16) {
      acc = __bfloat162float(static_cast<const __nv_bfloat16*>(p.in[0])[j]);
      for (int r = 1; r < p.ranks; ++r)
        acc = __fadd_rn(acc, __bfloat162float(static_cast<const __nv_bfloat16*>(p.in[r])[j]));
      static_cast<__nv_bfloat16*>(p.out)[i] = __float2bfloat16_rn(acc);
    } else {
      acc = static_cast<const float*>(p.in[0])[j];
      for (int r = 1; r < p.ranks; ++r) acc = __fadd_rn(acc, static_cast<const float*>(p.in[r])[j]);
      static_cast<float*>(p.out)[i] = acc;
    }
  }
}

}  // namespace

Status launch_rank_sum(const RankSumParams& p, cudaStream_t stream) {
  if (p.ranks < 1 || p.ranks > kMaxSharedRanks) {
    return invalid_argument("rank_sum: {} ranks, at most {} share a device", p.ranks, kMaxSharedRanks);
  }
  if (p.n == 0) return {};
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((p.n + threads - 1) / threads, 4096);
  if (p.bf16) {
    rank_sum_kernel<true><<<int(blocks), threads, 0, stream>>>(p);
  } else {
    rank_sum_kernel<false><<<int(blocks), threads, 0, stream>>>(p);
  }
  RILL_CUDA_CHECK_LAUNCH("rank_sum");
  return {};
}

}  // namespace rill::cuda
