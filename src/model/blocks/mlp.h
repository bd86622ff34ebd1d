// Gated MLP (SwiGLU for Kimi Linear, SiTU-GLU for K3): the dense layer-0 MLP and the shared experts.
#pragma once

#include <string>

#include "model/config.h"
#include "model/forward_context.h"
#include "model/weights/weight_table.h"

namespace rill::model {

struct MlpWeights {
  backend::LinearWeight gate_up;  // [2I, H]: gate_proj rows, then up_proj rows (one GEMM)
  backend::LinearWeight down;     // [H, I]
  int intermediate = 0;
};

// prefix: "...mlp." or "...shared_experts."; names gate_proj / up_proj / down_proj. `intermediate` is the stored
// width; part `rank` of `parts` of it is loaded (tensor parallelism: mlp_forward's out is then a partial sum).
void declare_mlp_weights(WeightTable& t, const std::string& prefix, int hidden, int intermediate, int rank,
                         int parts, MlpWeights& w);

struct GluSpec {
  backend::Activation activation = backend::Activation::Silu;
  float beta = 0.0f, linear_beta = 0.0f;
};
GluSpec glu_spec(const ModelConfig& c);

// out[T, H] = down(act(gate(x)) * up(x)). x_norm (or null): the input norm producing x, run by the gate|up
// GEMM (decoder_layer.h).
Status mlp_forward(ForwardContext& cx, const MlpWeights& w, const GluSpec& glu, TensorView x,
                   const backend::AddRmsNormArgs* x_norm, TensorView out);

}  // namespace rill::model
