// Backend::prefetch_weights on CUDA (backend option weight_prefetch): the named weights into L2 ahead of the
// kernels that read them.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

// Whether a prefetch is issued for a step of `tokens` rows: decode-sized steps (the GEMVs, whose launches are
// short enough that each one's first weight loads are a large part of it), on sm_90 or later (the bulk
// prefetch), with the option on.
bool weight_prefetch_wanted(int64_t tokens, const CudaContext& cx);

Status launch_weight_prefetch(const backend::PrefetchWeightsArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
