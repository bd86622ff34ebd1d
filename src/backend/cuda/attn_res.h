// Launcher: K3 Block Attention Residuals depth mix (spec §3.11; the CPU reference is backend/cpu/attn_res.cc).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_attn_res_mix(const backend::AttnResMixArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
