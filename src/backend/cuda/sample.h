// Launcher: per-row sampling on the GPU (the rule in backend/sampling.h); only ids leave the device.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

size_t sample_scratch_bytes(const backend::SampleArgs& a);
Status launch_sample(const backend::SampleArgs& a, const CudaContext& cx);
// Penalties, grammar masks and logprobs (backend.h PenaltyArgs / TokenMaskArgs / LogprobsArgs): penalties.cu.
Status launch_apply_penalties(const backend::PenaltyArgs& a, const CudaContext& cx);
Status launch_mask_logits(const backend::TokenMaskArgs& a, const CudaContext& cx);
Status launch_nonfinite_rows(const backend::NonfiniteRowsArgs& a, const CudaContext& cx);
Status launch_logprobs(const backend::LogprobsArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
