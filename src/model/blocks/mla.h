// Multi-head latent attention without RoPE (spec §3.4): q (full or q-LoRA), the latent cache write, causal
// latent attention over the paged cache, the optional K3 sigmoid output gate, o_proj.
#pragma once

#include <string>

#include "model/config.h"
#include "model/forward_context.h"
#include "model/shard.h"
#include "model/weights/weight_table.h"

namespace rill::model {

struct MlaWeights {
  backend::LinearWeight q_proj;     // [n*(nope+rope), H] (no q-LoRA)
  backend::LinearWeight q_a_proj;   // [q_lora, H]
  TensorView q_a_norm;              // F32 [q_lora]
  backend::LinearWeight q_b_proj;   // [n*(nope+rope), q_lora]
  backend::LinearWeight kv_a_proj;  // [kv_lora + rope, H]
  TensorView kv_a_norm;             // F32 [kv_lora]
  backend::LinearWeight kv_b_proj;  // [n*(nope+v), kv_lora]
  backend::LinearWeight g_proj;     // [n*v, H] (K3 output gate)
  backend::LinearWeight o_proj;     // [H, n*v]
};

// This rank's heads of c (tensor parallelism); mla_forward's out is then a partial sum the model reduces.
void declare_mla_weights(WeightTable& t, const std::string& prefix, const ModelConfig& c, const ModelShard& shard,
                         MlaWeights& w);

// u_norm (or null): the input norm producing u, run by the first projection group (decoder_layer.h).
Status mla_forward(ForwardContext& cx, const ModelConfig& c, const MlaWeights& w, TensorView u,
                   const backend::AddRmsNormArgs* u_norm, const LayerCache& cache, TensorView out);

}  // namespace rill::model
