// What a step of a model must move and compute (bytes, FLOPs), from its weight table and config: the
// denominators of the bench rows' ceiling fractions, shared by the single-model and the executor benchmarks.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace rill::bench {

// Parameter groups of the model's weight table: what a token touches (parameters, for FLOPs) and what a step
// must read (bytes: 2 per dense parameter, as stored on the GPU; MXFP4 experts their packed codes and scales;
// FP8 matrices 1 per parameter and their scales).
struct ParamCounts {
  double dense = 0;       // every matmul parameter outside routed experts, embedding and lm_head
  double one_expert = 0;  // parameters of one routed expert
  double lm_head = 0;
  double dense_bytes = 0, one_expert_bytes = 0, lm_head_bytes = 0;
};

ParamCounts count_params(const model::Model& m);

// FLOPs of a prefill of `n_tokens` new tokens whose contexts (per sequence) are `contexts`.
double prefill_flops(const model::Model& m, const ParamCounts& p, int64_t n_tokens, const std::vector<int>& contexts);

// Bytes a decode step of `batch` sequences at `ctx` must move (uniform routing over the experts).
double decode_bytes(const model::Model& m, const ParamCounts& p, int batch, int ctx);

}  // namespace rill::bench
