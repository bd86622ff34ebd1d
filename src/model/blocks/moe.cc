#include "model/blocks/moe.h"

namespace rill::model {

namespace {

// compressed-tensors mxfp4-pack-quantized experts (spec §2.3-§2.4): per logical [out, in] matrix a U8
// `weight_packed` [out, in/2] (low nibble = even column) and a U8 E8M0 `weight_scale` [out, in/32], stacked
// like the dense experts (w1 | w3 rows per expert, then w2) and kept packed bit for bit.
void declare_mxfp4_experts(WeightTable& t, const std::string& p, int E, int I, int Hx,
                           backend::ExpertWeights& x) {
  x.format = backend::WeightFormat::Mxfp4;
  const int gu = t.stack({E, 2 * I, Hx / 2}, WeightRole::Packed, &x.gate_up);
  const int gus = t.stack({E, 2 * I, Hx / 32}, WeightRole::Packed, &x.gate_up_scales);
  const int dn = t.stack({E, Hx, I / 2}, WeightRole::Packed, &x.down);
  const int dns = t.stack({E, Hx, I / 32}, WeightRole::Packed, &x.down_scales);
  for (int e = 0; e < E; ++e) {
    const std::string ex = p + "experts." + std::to_string(e) + ".";
    const int64_t row0 = int64_t(e) * 2 * I;  // first gate_up row of expert e
    t.stack_part(gu, ex + "w1.weight_packed", {I, Hx / 2}, row0 * (Hx / 2));
    t.stack_part(gus, ex + "w1.weight_scale", {I, Hx / 32}, row0 * (Hx / 32));
    t.stack_part(gu, ex + "w3.weight_packed", {I, Hx / 2}, (row0 + I) * (Hx / 2));
    t.stack_part(gus, ex + "w3.weight_scale", {I, Hx / 32}, (row0 + I) * (Hx / 32));
    t.stack_part(dn, ex + "w2.weight_packed", {Hx, I / 2}, int64_t(e) * Hx * (I / 2));
    t.stack_part(dns, ex + "w2.weight_scale", {Hx, I / 32}, int64_t(e) * Hx * (I / 32));
  }
}

}  // namespace

void declare_moe_weights(WeightTable& t, const std::string& p, const ModelConfig& c, MoeWeights& w) {
  const MoeConfig& m = c.moe;
  const int H = c.hidden_size, E = m.n_experts, I = m.intermediate_size;
  const int Hx = m.latent_size > 0 ? m.latent_size : H;  // the width the routed experts run in
  // The router weight is a Matrix so CUDA keeps it bf16; logits are still computed in fp32.
  t.matrix(p + "gate.weight", {E, H}, &w.router);
  t.vector(p + "gate.e_score_correction_bias", {E}, &w.router_bias);
  if (c.mxfp4_experts) {
    declare_mxfp4_experts(t, p, E, I, Hx, w.experts);
  } else {
    const int gu = t.stack({E, 2 * I, Hx}, WeightRole::Matrix, &w.experts.gate_up);
    const int dn = t.stack({E, Hx, I}, WeightRole::Matrix, &w.experts.down);
    for (int e = 0; e < E; ++e) {
      const std::string ex = p + "experts." + std::to_string(e) + ".";
      t.stack_part(gu, ex + "w1.weight", {I, Hx}, (int64_t(e) * 2 * I) * Hx);
      t.stack_part(gu, ex + "w3.weight", {I, Hx}, (int64_t(e) * 2 * I + I) * Hx);
      t.stack_part(dn, ex + "w2.weight", {Hx, I}, int64_t(e) * Hx * I);
    }
  }
  if (m.n_shared_experts > 0)
    declare_mlp_weights(t, p + "shared_experts.", H, m.n_shared_experts * I, w.shared);
  if (m.latent_size > 0) {
    t.matrix(p + "routed_expert_down_proj.weight", {Hx, H}, &w.latent_down);
    if (m.latent_norm) t.vector(p + "routed_expert_norm.weight", {Hx}, &w.latent_norm);
    t.matrix(p + "routed_expert_up_proj.weight", {H, Hx}, &w.latent_up);
  }
}

Status moe_forward(ForwardContext& cx, const ModelConfig& c, const MoeWeights& w, TensorView x,
                   TensorView out) {
  WorkspaceScope scope(cx.ws);
  const MoeConfig& m = c.moe;
  const int64_t T = x.size(0), k = m.n_experts_per_token;
  auto& be = cx.be;
  const GluSpec glu = glu_spec(c);

  backend::MoeRouteArgs route;
  route.x = x;
  route.gate_weight = w.router.weight;
  route.bias = w.router_bias;
  route.top_k = int(k);
  route.n_groups = m.n_groups;
  route.topk_group = m.topk_group;
  route.renormalize = m.renormalize;
  route.softmax = m.activation == RouterActivation::Softmax;
  route.scaling = m.routed_scaling_factor;
  route.ids = cx.ws.alloc(DType::I32, {T, k});
  route.weights = cx.ws.alloc(DType::F32, {T, k});
  RILL_TRY(be.moe_route(route));
  cx.tap("moe.ids", route.ids);
  cx.tap("moe.weights", route.weights);

  backend::MoeExpertsArgs ex;
  ex.ids = route.ids;
  ex.weights = route.weights;
  ex.experts = &w.experts;
  ex.activation = glu.activation;
  ex.beta = glu.beta;
  ex.linear_beta = glu.linear_beta;
  ex.scratch = &cx.ws;
  if (m.latent_size > 0) {
    ex.x = cx.ws.alloc(cx.act(), {T, m.latent_size});
    RILL_TRY(be.gemm({x, &w.latent_down, ex.x}));
    ex.out = cx.ws.alloc(cx.act(), {T, m.latent_size});
    RILL_TRY(be.moe_experts(ex));
    if (m.latent_norm) RILL_TRY(be.rms_norm({ex.out, w.latent_norm, c.rms_norm_eps, ex.out}));
    RILL_TRY(be.gemm({ex.out, &w.latent_up, out}));
  } else {
    // The shared expert reads the same x: the backend runs it with the routed experts (CUDA's decode GEMVs
    // take it as one more expert; elsewhere it is the same gemm, glu, gemm and add).
    ex.x = x;
    ex.out = out;
    if (m.n_shared_experts > 0) {
      ex.shared_gate_up = &w.shared.gate_up;
      ex.shared_down = &w.shared.down;
    }
    RILL_TRY(be.moe_experts(ex));
    cx.tap("moe.out", out);
    return {};
  }
  cx.tap("moe.routed", out);
  if (m.n_shared_experts > 0) {
    TensorView shared = cx.ws.alloc(cx.act(), {T, c.hidden_size});
    RILL_TRY(mlp_forward(cx, w.shared, glu, x, shared));
    cx.tap("moe.shared", shared);
    RILL_TRY(be.add({out, shared}));
  }
  return {};
}

}  // namespace rill::model
