// Internal launchers of the MLA phases (host-only declarations); launch_mla_attention in attention.cc runs
// them in order: plan, then decode (absorb, split-KV, combine, W_UV), then prefill (gather, expand, flash).
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/common/smem.h"
#include "backend/cuda/context.h"
#include "backend/cuda/mla/params.h"

namespace rill::cuda::mla {

// Host plan from layout->host (no device access) for the context's device (cx.sm_count) and options
// (mla_expand_rows); the scratch query and the launcher both plan with the same context, so their sizes
// agree. Fails on counts that overflow the int32 plan arrays.
Status make_plan(const backend::MlaAttentionArgs& a, const CudaContext& cx, Plan* out);

Status launch_plan(const PlanParams& p, cudaStream_t stream);
Status launch_head_gemm(const HeadGemmParams& p, bool b_is_kn, int n_heads, cudaStream_t stream);
Status launch_decode_splitkv(const DecodeParams& p, const CudaContext& cx);
Status launch_decode_combine(const CombineParams& p, cudaStream_t stream);
Status launch_gather(const GatherParams& p, cudaStream_t stream);
Status launch_prefill(const PrefillParams& p, const CudaContext& cx);

}  // namespace rill::cuda::mla
