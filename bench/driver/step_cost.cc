#include "bench/driver/step_cost.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace rill::bench {

ParamCounts count_params(const model::Model& m) {
  ParamCounts p;
  double experts = 0, expert_bytes = 0;
  for (const auto& s : m.weight_table().specs()) {
    const double n = double(s.shape.numel());
    // A packed MXFP4 tensor holds two weights per byte; its E8M0 scales are bytes without weights.
    const bool packed = s.role == model::WeightRole::Packed;
    if (s.role == model::WeightRole::Fp8Scale) continue;  // an FP8 checkpoint's scales: counted with their matrix
    const double params = !packed ? n : s.name.ends_with(".weight_packed") ? 2 * n : 0;
    // FP8 matrices (issue #35): one byte per weight plus their F32 block scales.
    const double bytes = packed                                  ? n
                         : s.role == model::WeightRole::Matrix ? double(m.weight_table().loaded_bytes_of(s, 2))
                                                               : 2 * n;
    if (s.name.find("embed_tokens") != std::string::npos) continue;
    if (s.name.find("lm_head") != std::string::npos) {
      p.lm_head += params;
      p.lm_head_bytes += bytes;
    } else if (s.name.find(".experts.") != std::string::npos && s.name.find("shared_experts") == std::string::npos) {
      experts += params;
      expert_bytes += bytes;
    } else {
      p.dense += params;
      p.dense_bytes += bytes;
    }
  }
  const auto& c = m.config();
  const int moe_layers = int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe));
  if (moe_layers && c.moe.n_experts) {
    p.one_expert = experts / (double(moe_layers) * c.moe.n_experts);
    p.one_expert_bytes = expert_bytes / (double(moe_layers) * c.moe.n_experts);
  }
  return p;
}

double prefill_flops(const model::Model& m, const ParamCounts& p, int64_t n_tokens, const std::vector<int>& contexts) {
  const auto& c = m.config();
  const int moe_layers = int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe));
  // dense holds the shared experts and every non-MoE matmul; routed experts: top_k per MoE layer.
  double f = 2.0 * double(n_tokens) * (p.dense + double(c.moe.n_experts_per_token) * p.one_expert * moe_layers);
  f += 2.0 * p.lm_head * double(contexts.size());  // one logits row per sequence
  const double qk = c.mla.qk_head_dim(), v = c.mla.v_head_dim;
  for (int ctx : contexts)  // causal attention: half the score matrix
    f += c.n_layers_of(model::LayerKind::Mla) * double(c.mla.n_heads) * double(ctx) * double(ctx) / 2 * 2 * (qk + v);
  const double d = c.kda.head_dim;  // KDA chunk math, ~6d^2 + 6Cd per token and head (anchors §3.5)
  f += double(n_tokens) * c.n_layers_of(model::LayerKind::Kda) * c.kda.n_heads * (6 * d * d + 6 * 64 * d);
  return f;
}

double decode_bytes(const model::Model& m, const ParamCounts& p, int batch, int ctx) {
  const auto& c = m.config();
  const int moe_layers = int(std::count(c.ffn_kinds.begin(), c.ffn_kinds.end(), model::FfnKind::Moe));
  const double E = c.moe.n_experts, k = c.moe.n_experts_per_token;
  const double unique = E > 0 ? E * (1.0 - std::pow(1.0 - k / E, batch)) : 0;  // uniform routing
  double b = p.dense_bytes + p.lm_head_bytes + unique * p.one_expert_bytes * moe_layers;
  b += 2.0 * double(batch) * double(c.kda_state_bytes_per_sequence());  // state read + write
  b += double(batch) * double(ctx) * double(c.kv_bytes_per_token(2));
  return b;
}

}  // namespace rill::bench
