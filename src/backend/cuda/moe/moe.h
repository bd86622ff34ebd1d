// Launchers for mixture of experts: routing on the GPU, and expert execution grouped by expert (grouped GEMM
// for prefill-sized batches, a gathered kernel for the few tokens of a decode step), combined in fp32.
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_moe_route(const backend::MoeRouteArgs& a, const CudaContext& cx);
// Whether launch_moe_route folds a's input norm (a.norm) into its decode logits GEMV (options.decode_fusion,
// T <= kGemvMaxRows, gemv_norm_fusable).
bool moe_route_fuses_norm(const backend::MoeRouteArgs& a, const CudaContext& cx);
size_t moe_experts_scratch_bytes(const backend::MoeExpertsArgs& a);
// Whether launch_moe_experts runs a's shared expert in its decode GEMVs (from shapes and formats only).
bool moe_fuses_shared_expert(const backend::MoeExpertsArgs& a);
Status launch_moe_experts(const backend::MoeExpertsArgs& a, const CudaContext& cx);
// Whether this build and device can run the Hopper grouped GEMMs of options.moe_wgmma (sm_90, sm_90a code in
// the build, the driver's TMA encoder); the first call looks the encoder up.
bool moe_wgmma_available(const CudaContext& cx);

}  // namespace rill::cuda
