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
// Whether the plan reserves the cuDNN prefill path's scratch (a cuDNN runner, mla_prefill != rill, a real layout).
bool prefill_through_cudnn(const backend::MlaAttentionArgs& a, const CudaContext& cx);

Status launch_plan(const PlanParams& p, cudaStream_t stream);
Status launch_head_gemm(const HeadGemmParams& p, bool b_is_kn, int n_heads, cudaStream_t stream);
Status launch_decode_splitkv(const DecodeParams& p, const CudaContext& cx);
Status launch_decode_combine(const CombineParams& p, cudaStream_t stream);
Status launch_gather(const GatherParams& p, cudaStream_t stream);
Status launch_prefill(const PrefillParams& p, const CudaContext& cx);
// The cuDNN path's inputs (sdpa_inputs.cu): K = [k_nope ; k_pe] per row and head, and one call's batch arrays
// (`dst`: kSdpaBatchBytes in SdpaBatch's layout, 16-byte aligned).
Status launch_k_build(const KBuildParams& p, cudaStream_t stream);
Status launch_sdpa_batch(const SdpaBatch& b, void* dst, cudaStream_t stream);

// One expansion group's attention through cuDNN (prefill_sdpa.cc), after its gather and expansion: K build, then
// a fused-attention call per kSdpaMaxBatch prefill sequences. false (nothing enqueued) where cuDNN has no plan
// for a shape under mla_prefill=auto, or the stream is being captured: the caller runs rill's kernel.
struct SdpaGroupArgs {
  const backend::MlaAttentionArgs* a;
  const ExpandGroup* group;
  const bf16* ctx;  // bf16 [group rows, 576]: the group's gathered latents
  const bf16* kvx;  // bf16 [group rows, H * 256]: their expansion
  bf16* k;          // bf16 [group rows, H, 192] + the zeroed tail (kSdpaTailRows): scratch for K
  void* arrays;     // kSdpaBatchBytes (SdpaBatch layout): scratch for one call's batch arrays
  float* stats;     // fp32 [tokens + kSdpaTailRows, H]: scratch for the softmax stats cuDNN writes
};
Result<bool> run_prefill_sdpa(const SdpaGroupArgs& g, const CudaContext& cx);

}  // namespace rill::cuda::mla
