// Launchers: KimiRMSNorm, fused residual add + RMSNorm, KDA's gated output RMSNorm (spec §3.0).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_rms_norm(const backend::RmsNormArgs& a, const CudaContext& cx);
Status launch_add_rms_norm(const backend::AddRmsNormArgs& a, const CudaContext& cx);
Status launch_kda_output_norm(const backend::KdaOutputArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
