#include "model/blocks/moe.h"

#include <numeric>

namespace rill::model {

namespace {

// The routed experts this rank holds: experts [begin, begin + count) (expert parallelism), each cut to columns
// part `rank` of `parts` of its width (expert-TP: w1/w3 rows, w2 columns).
struct ExpertSlice {
  int begin = 0, count = 0, rank = 0, parts = 1;
};

ExpertSlice expert_slice(const MoeConfig& m, const ModelShard& sh) {
  const int per = m.n_experts / sh.ep_size;
  return {sh.ep_rank * per, per, sh.moe_tp_rank, sh.moe_tp_size};
}

// Dense experts: per expert w1 | w3 rows of the [E, 2I, Hx] gate_up stack and w2 of the [E, Hx, I] down stack.
void declare_dense_experts(WeightTable& t, const std::string& p, const ExpertSlice& x, int I, int Hx,
                           backend::ExpertWeights& w) {
  const int Il = I / x.parts;
  // Under an FP8 plan both stacks share one block shape, so their blocks' rows divide both part heights.
  const int64_t row_unit = std::gcd(int64_t(Il), int64_t(Hx));
  const int gu = t.matrix_stack({x.count, 2 * Il, Hx}, &w.gate_up, &w.gate_up_scales, &w.format, &w.block, row_unit);
  const int dn = t.matrix_stack({x.count, Hx, Il}, &w.down, &w.down_scales, &w.format, &w.block, row_unit);
  for (int le = 0; le < x.count; ++le) {
    const std::string ex = p + "experts." + std::to_string(x.begin + le) + ".";
    t.stack_part(gu, ex + "w1.weight", {I, Hx}, (int64_t(le) * 2 * Il) * Hx).split(0, x.rank, x.parts);
    t.stack_part(gu, ex + "w3.weight", {I, Hx}, (int64_t(le) * 2 * Il + Il) * Hx).split(0, x.rank, x.parts);
    t.stack_part(dn, ex + "w2.weight", {Hx, I}, int64_t(le) * Hx * Il).split(1, x.rank, x.parts);
  }
}

// compressed-tensors mxfp4-pack-quantized experts (spec §2.3-§2.4): per logical [out, in] matrix a U8
// `weight_packed` [out, in/2] (low nibble = even column) and a U8 E8M0 `weight_scale` [out, in/32], stacked
// like the dense experts (w1 | w3 rows per expert, then w2) and kept packed bit for bit. w2 splits by columns
// in whole scale groups (check_shard).
void declare_mxfp4_experts(WeightTable& t, const std::string& p, const ExpertSlice& x, int I, int Hx,
                           backend::ExpertWeights& w) {
  w.format = backend::WeightFormat::Mxfp4;
  const int Il = I / x.parts, E = x.count;
  const int gu = t.stack({E, 2 * Il, Hx / 2}, WeightRole::Packed, &w.gate_up);
  const int gus = t.stack({E, 2 * Il, Hx / 32}, WeightRole::Packed, &w.gate_up_scales);
  const int dn = t.stack({E, Hx, Il / 2}, WeightRole::Packed, &w.down);
  const int dns = t.stack({E, Hx, Il / 32}, WeightRole::Packed, &w.down_scales);
  for (int le = 0; le < E; ++le) {
    const std::string ex = p + "experts." + std::to_string(x.begin + le) + ".";
    const int64_t row0 = int64_t(le) * 2 * Il;  // first gate_up row of expert le
    t.stack_part(gu, ex + "w1.weight_packed", {I, Hx / 2}, row0 * (Hx / 2)).split(0, x.rank, x.parts);
    t.stack_part(gus, ex + "w1.weight_scale", {I, Hx / 32}, row0 * (Hx / 32)).split(0, x.rank, x.parts);
    t.stack_part(gu, ex + "w3.weight_packed", {I, Hx / 2}, (row0 + Il) * (Hx / 2)).split(0, x.rank, x.parts);
    t.stack_part(gus, ex + "w3.weight_scale", {I, Hx / 32}, (row0 + Il) * (Hx / 32)).split(0, x.rank, x.parts);
    t.stack_part(dn, ex + "w2.weight_packed", {Hx, I / 2}, int64_t(le) * Hx * (Il / 2)).split(1, x.rank, x.parts);
    t.stack_part(dns, ex + "w2.weight_scale", {Hx, I / 32}, int64_t(le) * Hx * (Il / 32)).split(1, x.rank, x.parts);
  }
}

// The experts of other ranks are in the checkpoint too: accepted, not loaded.
void declare_experts_elsewhere(WeightTable& t, const std::string& p, const MoeConfig& m, const ExpertSlice& x,
                               bool mxfp4) {
  for (int e = 0; e < m.n_experts; ++e) {
    if (e >= x.begin && e < x.begin + x.count) continue;
    const std::string ex = p + "experts." + std::to_string(e) + ".";
    for (const char* w : {"w1", "w2", "w3"}) {
      if (mxfp4) {
        t.held_elsewhere(ex + w + ".weight_packed");
        t.held_elsewhere(ex + w + ".weight_scale");
      } else {
        t.held_elsewhere(ex + w + ".weight");
      }
    }
  }
}

}  // namespace

void declare_moe_weights(WeightTable& t, const std::string& p, const ModelConfig& c, const ModelShard& sh,
                         MoeWeights& w) {
  const MoeConfig& m = c.moe;
  const int H = c.hidden_size, I = m.intermediate_size;
  const int Hx = m.latent_size > 0 ? m.latent_size : H;  // the width the routed experts run in
  // The router weight is a Matrix so CUDA keeps it bf16; logits are still computed in fp32. Replicated: every
  // rank routes every token identically.
  t.matrix(p + "gate.weight", {m.n_experts, H}, &w.router);
  t.vector(p + "gate.e_score_correction_bias", {m.n_experts}, &w.router_bias);
  const ExpertSlice x = expert_slice(m, sh);
  if (c.mxfp4_experts) declare_mxfp4_experts(t, p, x, I, Hx, w.experts);
  else declare_dense_experts(t, p, x, I, Hx, w.experts);
  declare_experts_elsewhere(t, p, m, x, c.mxfp4_experts);
  if (m.n_shared_experts > 0)
    declare_mlp_weights(t, p + "shared_experts.", H, m.n_shared_experts * I, sh.tp_rank, sh.tp_size, w.shared);
  if (m.latent_size > 0) {  // replicated: the latent is reduced before its norm
    t.matrix(p + "routed_expert_down_proj.weight", {Hx, H}, &w.latent_down);
    if (m.latent_norm) t.vector(p + "routed_expert_norm.weight", {Hx}, &w.latent_norm);
    t.matrix(p + "routed_expert_up_proj.weight", {H, Hx}, &w.latent_up);
  }
}

Status moe_forward(ForwardContext& cx, const ModelConfig& c, const ModelShard& sh, const MoeWeights& w,
                   TensorView x, const backend::AddRmsNormArgs* x_norm, TensorView out) {
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
  if (sh.ep_size > 1) {
    const ExpertSlice held = expert_slice(m, sh);
    route.expert_begin = held.begin;
    route.n_local = held.count;
  }
  route.norm = x_norm;  // the router reads x first
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
    RILL_TRY(be.gemm({x, &w.latent_down, ex.x, &cx.ws}));
    ex.out = cx.ws.alloc(cx.act(), {T, m.latent_size});
    RILL_TRY(be.moe_experts(ex));
    RILL_TRY(cx.reduce(ex.out));  // the routed latent is split over the tp ranks' experts
    if (m.latent_norm) RILL_TRY(be.rms_norm({ex.out, w.latent_norm, c.rms_norm_eps, ex.out}));
    // Replicated from here: one rank adds the up-projection into the partial sum the model reduces.
    if (sh.tp_rank == 0)
      RILL_TRY(be.gemm({ex.out, &w.latent_up, out, &cx.ws}));
    else
      RILL_TRY(be.fill_zero(out));
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
    RILL_TRY(mlp_forward(cx, w.shared, glu, x, nullptr, shared));
    cx.tap("moe.shared", shared);
    RILL_TRY(be.add({out, shared}));
  }
  return {};
}

}  // namespace rill::model
