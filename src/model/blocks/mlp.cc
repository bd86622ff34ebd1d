#include "model/blocks/mlp.h"

namespace rill::model {

void declare_mlp_weights(WeightTable& t, const std::string& prefix, int hidden, int intermediate, int rank,
                         int parts, MlpWeights& w) {
  const int I = intermediate / parts;  // column-parallel gate/up, row-parallel down
  w.intermediate = I;
  const int s = t.matrix_stack({2 * I, hidden}, &w.gate_up, I);
  t.stack_part(s, prefix + "gate_proj.weight", {intermediate, hidden}, 0).split(0, rank, parts);
  t.stack_part(s, prefix + "up_proj.weight", {intermediate, hidden}, int64_t(I) * hidden).split(0, rank, parts);
  t.matrix(prefix + "down_proj.weight", {hidden, intermediate}, &w.down).split(1, rank, parts);
}

GluSpec glu_spec(const ModelConfig& c) {
  if (c.activation == GluActivation::Situ) return {backend::Activation::Situ, c.situ_beta, c.situ_linear_beta};
  return {backend::Activation::Silu, 0.0f, 0.0f};
}

Status mlp_forward(ForwardContext& cx, const MlpWeights& w, const GluSpec& glu, TensorView x,
                   const backend::AddRmsNormArgs* x_norm, TensorView out) {
  WorkspaceScope scope(cx.ws);
  const int64_t T = x.size(0), I = w.intermediate;
  TensorView gu = cx.ws.alloc(cx.act(), {T, 2 * I});
  RILL_TRY(cx.be.gemm_group({{{x, &w.gate_up, gu, &cx.ws}}, x_norm}));  // a group: it carries the input norm
  cx.tap("mlp.gate_up", gu);
  TensorView h = cx.ws.alloc(cx.act(), {T, I});
  RILL_TRY(cx.be.glu({gu.narrow(1, 0, I), gu.narrow(1, I, I), h, glu.activation, glu.beta, glu.linear_beta}));
  return cx.be.gemm({h, &w.down, out, &cx.ws});
}

}  // namespace rill::model
