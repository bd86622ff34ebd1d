// The rank-order sum the shared-device communicator reduces with: out[i] = in[0][offset + i] + in[1][...] +
// ... accumulated in fp32 in rank order and rounded once, the thread communicator's rule bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/status.h"

namespace rill::cuda {

inline constexpr int kMaxSharedRanks = 16;

struct RankSumParams {
  const void* in[kMaxSharedRanks];  // [ranks] device pointers, each >= offset + n elements
  void* out;                        // [n]
  int ranks;
  int64_t offset;
  int64_t n;
  bool bf16;  // else F32
};

Status launch_rank_sum(const RankSumParams& p, cudaStream_t stream);

}  // namespace rill::cuda
