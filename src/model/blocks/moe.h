// Mixture of experts (spec §3.5-§3.7): sigmoid router with correction bias and grouped top-k, routed experts
// combined in fp32, shared experts on the same input. The K3 latent variant runs the experts in a narrower
// width between a down- and an up-projection.
#pragma once

#include <string>

#include "model/blocks/mlp.h"
#include "model/config.h"
#include "model/forward_context.h"
#include "model/shard.h"
#include "model/weights/weight_table.h"

namespace rill::model {

struct MoeWeights {
  backend::LinearWeight router;  // [E, H] (matrix dtype; logits are computed in fp32)
  TensorView router_bias;  // F32 [E] e_score_correction_bias
  backend::ExpertWeights experts;
  MlpWeights shared;       // width n_shared * moe_intermediate (absent when n_shared == 0)
  // K3 latent MoE.
  backend::LinearWeight latent_down;  // [L, H]
  TensorView latent_norm;             // F32 [L]
  backend::LinearWeight latent_up;    // [H, L]
};

// This rank's routed experts (expert parallelism) at its part of their width (expert-TP), and its part of the
// shared experts (tensor parallelism); the router and K3's latent projections are replicated.
void declare_moe_weights(WeightTable& t, const std::string& prefix, const ModelConfig& c, const ModelShard& shard,
                         MoeWeights& w);

// Under parallelism out is this rank's partial sum (the model reduces it over the tp group). x_norm (or null):
// the input norm producing x, run by the router (decoder_layer.h).
Status moe_forward(ForwardContext& cx, const ModelConfig& c, const ModelShard& shard, const MoeWeights& w,
                   TensorView x, const backend::AddRmsNormArgs* x_norm, TensorView out);

}  // namespace rill::model
