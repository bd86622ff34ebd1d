// The grouped (prefill) expert GEMMs through cuBLAS (cublas_grouped.h), between the plan kernel and the
// combine of experts.cu: gather x into expert order, gate_up, the activation in place, down. Same rounding
// points as the mma.sync grouped kernels (gate and up rounded to bf16 before the activation, its result
// rounded to bf16, each expert's output rounded to bf16 before the combine).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/context.h"
#include "backend/cuda/moe/params.h"

namespace rill::cuda::moe {

struct CublasExpertsArgs {
  const backend::MoeExpertsArgs* args;
  int E, I, Hx;
  int64_t pairs;
  const int32_t* expert_offsets;  // [E + 1], device
  const int32_t* slot_token;      // [pairs], device: the token feeding each slot
  bf16* xy;                       // [pairs, Hx]: x in expert order, then each slot's expert output y
  bf16* gate_up;    // [pairs, 2I]: gate | up per slot, then the activation in its first I columns
  void** pointers;  // [6 E] device pointer arrays of the two grouped calls
};

Status run_expert_gemms_cublas(const CublasExpertsArgs& c, const CudaContext& cx);

// xy[slot] = x[slot_token[slot]] for the valid slots (offsets[E] of the `pairs`): the activations in expert
// order, rows of Hx (a multiple of 8, rows 16-byte aligned). Shared with the wgmma path (grouped_wgmma.h).
Status launch_gather_rows(const backend::MoeExpertsArgs& a, const int32_t* slot_token, const int32_t* offsets,
                          int E, int Hx, int64_t pairs, bf16* xy, cudaStream_t stream);

}  // namespace rill::cuda::moe
