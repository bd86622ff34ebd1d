// Launchers: embedding, residual add, GLU activations, sigmoid gate, row gather, seeded random fill.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_embed(const backend::EmbedArgs& a, const CudaContext& cx);
Status launch_add(const backend::AddArgs& a, const CudaContext& cx);
Status launch_glu(const backend::GluArgs& a, const CudaContext& cx);
Status launch_sigmoid_gate(const backend::SigmoidGateArgs& a, const CudaContext& cx);
Status launch_gather_rows(const backend::GatherRowsArgs& a, const CudaContext& cx);
// Same values as CpuBackend::fill_random for the same (seed, index): uniform01 from core/rng.h.
Status launch_fill_random(TensorView t, uint64_t seed, float lo, float hi, const CudaContext& cx);

}  // namespace rill::cuda
