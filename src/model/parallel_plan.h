// ParallelPlan: what one GPU of a tensor x expert x pipeline mapping holds (issue #17, `rill inspect -tp -ep
// -pp`, docs/MULTI_GPU.md): per pipeline stage, its layers, the bytes of its rank's weight shard as the GPU
// stores them (matrices bf16, norms and gates f32, MXFP4 payloads as packed), and what its caches cost per
// sequence and per token. Computed from the declared weight table of the rank's shard, so it is what the
// loader would allocate. Stages are the model's (model/shard.h stage_layers: contiguous, even layer ranges;
// the first holds the embedding, the last the final norm and lm_head).
#pragma once

#include <string>
#include <vector>

#include "dist/mapping.h"
#include "model/config.h"
#include "model/shard.h"

namespace rill::model {

struct StagePlan {
  int first_layer = 0, end_layer = 0;  // [first, end)
  int n_kda = 0, n_mla = 0;
  int64_t weight_bytes = 0;              // one rank of the stage
  int64_t state_bytes_per_sequence = 0;  // fp32 KDA state + bf16 conv windows of the stage's KDA layers
  int64_t kv_bytes_per_token = 0;        // bf16 MLA latents of the stage's MLA layers (replicated over tp)
};

struct ParallelPlan {
  dist::ParallelSizes sizes;
  ModelShard shard;  // rank 0's coordinates (every rank of a stage holds the same sizes)
  std::vector<StagePlan> stages;
  // The largest per-GPU weights over the stages.
  int64_t max_weight_bytes() const;
};

// Refuses a mapping whose arithmetic or model dimensions do not divide (naming the flag), or more stages
// than layers.
Result<ParallelPlan> plan_parallel(const ModelConfig& config, const dist::ParallelSizes& sizes);

}  // namespace rill::model
