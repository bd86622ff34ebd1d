// Launcher: K3 Block Attention Residuals depth mix (spec §3.11; the CPU reference is backend/cpu/attn_res.cc).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

// At most this many candidates (K3: 61 layers in blocks of at least 1 give <= 62).
constexpr int kAttnResMaxCandidates = 64;

Status launch_attn_res_mix(const backend::AttnResMixArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
