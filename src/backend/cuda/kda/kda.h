// Launchers for Kimi Delta Attention: the fused conv + gates + beta prepare, and the gated delta rule
// (chunked prefill kernel for multi-token sequences, fused recurrent step for single tokens).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_kda_prepare(const backend::KdaPrepareArgs& a, const CudaContext& cx);
size_t kda_attention_scratch_bytes(const backend::KdaAttentionArgs& a);
Status launch_kda_attention(const backend::KdaAttentionArgs& a, const CudaContext& cx);
// Speculative decoding's replay records folded into their slots (fold.cu).
Status launch_kda_fold(const backend::KdaFoldArgs& a, const CudaContext& cx);
// The fused decode step: whether `a` fits the kernel (formats and sizes; the model uses it where it fits
// unless CudaBackendOptions::kda_fused_decode is off), and its launcher.
bool kda_decode_fusable(const backend::KdaDecodeArgs& a);
// Whether the fused kernel is the faster path for this step's sequence count: two sequences or more (one CTA
// a head each), or one whose heads take at most a quarter of the SMs (the split form, a cluster of 4 CTAs a
// head; Kimi-Linear's batch 1). One K3 sequence (96 heads) keeps the separate ops.
bool kda_decode_fusion_pays(int n_seqs, int n_heads, const CudaContext& cx);
Status launch_kda_decode(const backend::KdaDecodeArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
