// Kimi Delta Attention block (spec §3.3): projections, short conv + gates (kda_prepare), the gated delta
// rule (kda_attention), gated RMSNorm and o_proj. Shared by kimi_linear and kimi_k3; the differences are
// KdaConfig fields (bounded forget gate, full-rank output gate).
#pragma once

#include <string>

#include "model/config.h"
#include "model/forward_context.h"
#include "model/shard.h"
#include "model/weights/weight_table.h"

namespace rill::model {

struct KdaWeights {
  backend::LinearWeight qkv_proj;  // [3P, H]: q_proj | k_proj | v_proj rows
  TensorView conv_weight;          // F32 [3P, K]: q_conv1d | k_conv1d | v_conv1d taps
  backend::LinearWeight f_a_proj;  // [d, H]
  backend::LinearWeight f_b_proj;  // [P, d]
  TensorView a_log;                // F32 [Hk]
  TensorView dt_bias;              // F32 [P]
  backend::LinearWeight b_proj;    // [Hk, H]
  backend::LinearWeight g_a_proj;  // [d, H]  (low-rank output gate, Kimi Linear)
  backend::LinearWeight g_b_proj;  // [P, d]
  backend::LinearWeight g_proj;    // [P, H]  (full-rank output gate, K3)
  TensorView o_norm;               // F32 [d]
  backend::LinearWeight o_proj;    // [H, P]
};

// The HF names of one KDA layer under `prefix` ("model.layers.{i}.self_attn."): this rank's heads of c.
void declare_kda_weights(WeightTable& t, const std::string& prefix, const ModelConfig& c, const ModelShard& shard,
                         KdaWeights& w);

// out[T, H] = KDA(u[T, H]) for the tokens of the batch, reading and updating the layer's state slots. Under
// tensor parallelism out is this rank's partial sum (o_proj is row-parallel); the model reduces it.
// u_norm (or null): the input norm producing u, run by the first projection group (decoder_layer.h).
Status kda_forward(ForwardContext& cx, const ModelConfig& c, const KdaWeights& w, TensorView u,
                   const backend::AddRmsNormArgs* u_norm, const LayerCache& cache, TensorView out);

}  // namespace rill::model
