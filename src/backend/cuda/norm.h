// Launchers: KimiRMSNorm, fused residual add + RMSNorm, KDA's gated output RMSNorm (spec §3.0).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_rms_norm(const backend::RmsNormArgs& a, const CudaContext& cx);
Status launch_add_rms_norm(const backend::AddRmsNormArgs& a, const CudaContext& cx);
Status launch_kda_output_norm(const backend::KdaOutputArgs& a, const CudaContext& cx);
// Threads of the (add_)rms_norm launch per row of width N read `vec` elements at a time (at most 256): the
// decode GEMV that folds add_rms_norm in (gemm/gemv.cuh) spreads a row over as many of its threads.
int norm_row_threads(int64_t N, int vec);

}  // namespace rill::cuda
