// The sublayers every Kimi decoder layer has (Kimi Linear and K3): two pre-norms, a KDA or MLA mixer and a
// dense MLP or MoE feed-forward, which of each the config says per layer. The models differ in how they join
// the sublayers: plain residual adds (kimi_linear), Block Attention Residuals (kimi_k3).
#pragma once

#include <string>

#include "model/blocks/kda.h"
#include "model/blocks/mla.h"
#include "model/blocks/mlp.h"
#include "model/blocks/moe.h"

namespace rill::model {

struct DecoderLayerWeights {
  TensorView input_norm;  // F32 [H]
  TensorView post_norm;   // F32 [H]
  KdaWeights kda;         // KDA layers
  MlaWeights mla;         // MLA layers
  MlpWeights mlp;         // dense layers
  MoeWeights moe;         // MoE layers
};

// Layer `i`'s norms, mixer and feed-forward under `prefix` ("model.layers.{i}."): this rank's share.
void declare_decoder_layer(WeightTable& t, const std::string& prefix, int i, const ModelConfig& c,
                           const ModelShard& shard, DecoderLayerWeights& w);

// out[T, H] = layer i's mixer (KDA or MLA) of u; each rank's partial sum is completed by one all-reduce.
// u_norm (or null): the add_rms_norm whose out is u, not yet run — the sublayer's first op runs it (as its
// input norm, which a backend may fold into that op) before anything reads u.
Status mixer_forward(ForwardContext& cx, const ModelConfig& c, int i, const DecoderLayerWeights& w, TensorView u,
                     const backend::AddRmsNormArgs* u_norm, const LayerCache& cache, TensorView out);
// out[T, H] = layer i's feed-forward (dense MLP or MoE) of x, completed across ranks the same way; x_norm as
// u_norm.
Status ffn_forward(ForwardContext& cx, const ModelConfig& c, const ModelShard& shard, int i,
                   const DecoderLayerWeights& w, TensorView x, const backend::AddRmsNormArgs* x_norm,
                   TensorView out);

}  // namespace rill::model
