// Launchers for latent attention: the paged cache write, and attention (flash-style causal prefill; split-KV
// absorbed decode over the paged cache with a combine pass).
#pragma once

#include "backend/backend.h"
#include "backend/cuda/context.h"

namespace rill::cuda {

Status launch_mla_cache_write(const backend::MlaCacheWriteArgs& a, const CudaContext& cx);
size_t mla_attention_scratch_bytes(const backend::MlaAttentionArgs& a, const CudaContext& cx);
Status launch_mla_attention(const backend::MlaAttentionArgs& a, const CudaContext& cx);

}  // namespace rill::cuda
