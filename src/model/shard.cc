#include "model/shard.h"

#include <fmt/format.h>

#include <tuple>

#include "dist/mapping.h"

namespace rill::model {

std::pair<int, int> stage_layers(int n_layers, int pp_rank, int pp_size) {
  return {int(int64_t(pp_rank) * n_layers / pp_size), int(int64_t(pp_rank + 1) * n_layers / pp_size)};
}

ModelShard ModelShard::from_mapping(const dist::Mapping& m, dist::Communicator* tp_comm,
                                    dist::Communicator* pp_comm) {
  ModelShard s;
  s.tp_rank = m.tp_rank();
  s.tp_size = m.tp_size();
  s.ep_rank = m.ep_rank();
  s.ep_size = m.ep_size();
  s.moe_tp_rank = m.moe_tp_rank();
  s.moe_tp_size = m.moe_tp_size();
  s.pp_rank = m.pp_rank();
  s.pp_size = m.pp_size();
  s.tp_comm = m.tp_size() > 1 ? tp_comm : nullptr;
  s.pp_comm = m.pp_size() > 1 ? pp_comm : nullptr;
  return s;
}

std::string ModelShard::describe() const {
  std::string out = fmt::format("tp {}/{}, ep {}/{}, moe_tp {}/{}", tp_rank, tp_size, ep_rank, ep_size,
                                moe_tp_rank, moe_tp_size);
  if (pp_size > 1) out += fmt::format(", pp {}/{}", pp_rank, pp_size);
  return out;
}

Status check_shard(const ModelConfig& c, const ModelShard& s) {
  if (s.tp_size < 1 || s.ep_size < 1 || s.moe_tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size ||
      s.ep_rank < 0 || s.ep_rank >= s.ep_size || s.moe_tp_rank < 0 || s.moe_tp_rank >= s.moe_tp_size ||
      s.pp_size < 1 || s.pp_rank < 0 || s.pp_rank >= s.pp_size)
    return invalid_argument("shard {} is not a rank of its groups", s.describe());
  // With dp = 1 the ranks that split the experts are exactly the tp group (Mapping: ep x moe_tp = dp x tp).
  if (s.ep_size * s.moe_tp_size != s.tp_size)
    return invalid_argument("expert parallelism {} x expert-TP {} must equal the tensor-parallel size {} "
                            "(data-parallel attention is not supported)", s.ep_size, s.moe_tp_size, s.tp_size);
  if (s.pp_size > c.n_layers)
    return invalid_argument("--pipeline-parallel-size {} is more stages than the model's {} layers", s.pp_size,
                            c.n_layers);
  std::string why;
  auto need = [&](int64_t n, int parts, const char* what, const char* flag) {
    if (parts > 1 && n % parts != 0 && why.empty())
      why = fmt::format("{} = {} is not divisible by {} {}", what, n, flag, parts);
  };
  const char* tp = "--tensor-parallel-size";
  need(c.vocab_size, s.tp_size, "vocab_size (the lm_head's rows)", tp);
  if (c.n_layers_of(LayerKind::Kda) > 0) need(c.kda.n_heads, s.tp_size, "the KDA heads", tp);
  if (c.n_layers_of(LayerKind::Mla) > 0) need(c.mla.n_heads, s.tp_size, "the MLA heads", tp);
  bool dense = false, moe = false;
  for (FfnKind k : c.ffn_kinds) (k == FfnKind::Dense ? dense : moe) = true;
  if (dense) need(c.intermediate_size, s.tp_size, "intermediate_size (the dense MLP)", tp);
  if (moe) {
    const MoeConfig& m = c.moe;
    need(int64_t(m.n_shared_experts) * m.intermediate_size, s.tp_size, "the shared experts' width", tp);
    need(m.n_experts, s.ep_size, "the routed experts", "--expert-parallel-size");
    // An MXFP4 expert splits in whole 32-column scale groups (its down projection is split by columns).
    const int grain = c.mxfp4_experts ? 32 : 1;
    if (s.moe_tp_size > 1 && m.intermediate_size % (s.moe_tp_size * grain) != 0 && why.empty())
      why = fmt::format("moe_intermediate_size = {} cannot be split over {} expert-TP ranks (tensor-parallel "
                        "size / expert-parallel size){}; raise --expert-parallel-size", m.intermediate_size,
                        s.moe_tp_size, c.mxfp4_experts ? " in whole 32-column MXFP4 scale groups" : "");
  }
  if (!why.empty()) return invalid_argument("cannot shard the model ({}): {}", s.describe(), why);
  return {};
}

ModelConfig shard_config(const ModelConfig& global, const ModelShard& s) {
  ModelConfig c = global;
  c.kda.n_heads /= s.tp_size;
  c.mla.n_heads /= s.tp_size;
  if (s.pp_size > 1) std::tie(c.first_layer, c.end_layer) = stage_layers(global.n_layers, s.pp_rank, s.pp_size);
  return c;
}

}  // namespace rill::model
