// Random model shapes for the GPU-vs-CPU model tests (issue #15): each draw picks a configuration from the
// space the CUDA kernels support and the test prints it with its seed, so a failing shape is replayed with
// RILL_TEST_SEED. Space (both families): hidden 64-512 in steps of 32, 3-8 layers with MLA first, last, adjacent
// or isolated (at least one MLA and one KDA layer), MLA heads 1-4, q-LoRA none or 32-128, KDA heads 1-4, 4-32
// experts with top-k 1-8, one routing group or several (>= 2 experts each), 0-3 shared experts, expert widths
// multiples of 32; K3 adds latent expert widths (multiples of 32 up to hidden) and AttnRes blocks of 1-4.
#pragma once

#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "model/random_checkpoint.h"

namespace rill::testing {

struct FuzzedShape {
  nlohmann::ordered_json config;
  std::string summary;  // printed beside the seed
  int vocab = 0;
};

namespace fuzz_detail {

inline int pick(std::mt19937& rng, int lo, int hi) { return lo + int(rng() % uint32_t(hi - lo + 1)); }
inline int pick_multiple(std::mt19937& rng, int lo, int hi, int step) { return step * pick(rng, lo / step, hi / step); }

// 1-based MLA / KDA layer lists: one of four schedule shapes, then random extra MLA layers.
inline void schedule(std::mt19937& rng, int n_layers, std::vector<int>* mla, std::vector<int>* kda,
                     std::string* what) {
  std::vector<bool> is_mla(size_t(n_layers + 1), false);
  switch (rng() % 4) {
    case 0: is_mla[1] = true, *what = "MLA first"; break;
    case 1: is_mla[size_t(n_layers)] = true, *what = "MLA last"; break;
    case 2: {
      const int at = pick(rng, 1, n_layers - 1);
      is_mla[size_t(at)] = is_mla[size_t(at + 1)] = true, *what = "MLA adjacent";
      break;
    }
    default: is_mla[size_t(pick(rng, 2, n_layers - 1))] = true, *what = "MLA isolated";
  }
  for (int l = 1; l <= n_layers; ++l)
    if (rng() % 5 == 0) is_mla[size_t(l)] = true;
  int n_mla = 0;
  for (int l = 1; l <= n_layers; ++l) n_mla += is_mla[size_t(l)];
  if (n_mla == n_layers) is_mla[size_t(is_mla[1] ? n_layers : 1)] = false;  // keep one KDA layer
  for (int l = 1; l <= n_layers; ++l) (is_mla[size_t(l)] ? mla : kda)->push_back(l);
}

// The MoE routing options shared by both families: experts, top-k, groups.
inline std::string routing(std::mt19937& rng, nlohmann::ordered_json& t) {
  const int E = pick(rng, 4, 32);
  int groups = 1, topk_group = 1;
  if (rng() % 2)
    for (int g : {8, 4, 2})
      if (E % g == 0 && E / g >= 2 && rng() % 2) {
        groups = g;
        break;
      }
  const int k = pick(rng, 1, std::min(8, E));
  if (groups > 1) {
    // Enough groups kept to hold k experts; sometimes all of them (then grouping is a no-op).
    const int need = (k + E / groups - 1) / (E / groups);
    topk_group = pick(rng, need, groups);
  }
  t["num_experts"] = E;
  t["num_experts_per_token"] = k;
  t["num_expert_group"] = groups;
  t["topk_group"] = topk_group;
  t["use_grouped_topk"] = groups > 1;
  t["num_shared_experts"] = pick(rng, 0, 3);
  t["moe_intermediate_size"] = pick_multiple(rng, 32, 128, 32);
  t["moe_renormalize"] = bool(rng() % 2);
  t["first_k_dense_replace"] = pick(rng, 0, 2);
  return fmt::format("{} experts top-{} in {} group(s) keeping {}, {} shared, width {}", E, k, groups, topk_group,
                     t["num_shared_experts"].get<int>(), t["moe_intermediate_size"].get<int>());
}

inline std::string attention(std::mt19937& rng, nlohmann::ordered_json& t, int n_layers) {
  std::vector<int> mla, kda;
  std::string what;
  schedule(rng, n_layers, &mla, &kda, &what);
  t["num_hidden_layers"] = n_layers;
  t["linear_attn_config"]["kda_layers"] = kda;
  t["linear_attn_config"]["full_attn_layers"] = mla;
  t["linear_attn_config"]["num_heads"] = pick(rng, 1, 4);
  t["num_attention_heads"] = t["num_key_value_heads"] = pick(rng, 1, 4);
  const int q_lora = rng() % 3 == 0 ? 0 : pick_multiple(rng, 32, 128, 32);
  if (q_lora == 0)
    t["q_lora_rank"] = nullptr;
  else
    t["q_lora_rank"] = q_lora;
  return fmt::format("{} layers ({}: MLA {}), {} MLA heads, q-LoRA {}, {} KDA heads", n_layers, what,
                     fmt::join(mla, ","), t["num_attention_heads"].get<int>(), q_lora,
                     t["linear_attn_config"]["num_heads"].get<int>());
}

}  // namespace fuzz_detail

inline FuzzedShape fuzz_kimi_linear(std::mt19937& rng) {
  using namespace fuzz_detail;
  FuzzedShape s;
  s.vocab = pick(rng, 512, 1024);
  s.config = nlohmann::ordered_json::parse(R"({
    "model_type": "kimi_linear", "hidden_act": "silu", "rms_norm_eps": 1e-5, "routed_scaling_factor": 2.446,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": true,
    "linear_attn_config": {"head_dim": 128, "short_conv_kernel_size": 4}, "bos_token_id": 1, "eos_token_id": 2})");
  auto& t = s.config;
  t["vocab_size"] = s.vocab;
  const int hidden = pick_multiple(rng, 64, 512, 32);
  t["hidden_size"] = hidden;
  t["intermediate_size"] = pick_multiple(rng, 64, 512, 32);
  const std::string att = attention(rng, t, pick(rng, 3, 8));
  const std::string moe = routing(rng, t);
  s.summary = fmt::format("kimi_linear: hidden {}, vocab {}, {}; {}", hidden, s.vocab, att, moe);
  return s;
}

inline FuzzedShape fuzz_kimi_k3(std::mt19937& rng) {
  using namespace fuzz_detail;
  FuzzedShape s;
  s.vocab = pick(rng, 512, 1024);
  s.config = model::tiny_kimi_k3_config(s.vocab, 1, 2);
  auto& t = s.config["text_config"];
  const int hidden = pick_multiple(rng, 64, 512, 32);
  t["hidden_size"] = hidden;
  t["intermediate_size"] = pick_multiple(rng, 64, 512, 32);
  const std::string att = attention(rng, t, pick(rng, 3, 8));
  const std::string moe = routing(rng, t);
  t["routed_expert_hidden_size"] = pick_multiple(rng, 32, hidden, 32);
  t["latent_moe_use_norm"] = bool(rng() % 2);
  t["attn_res_block_size"] = pick(rng, 1, 4);
  t["linear_attn_config"]["gate_lower_bound"] = rng() % 2 ? -5.0 : -4.0;
  s.summary = fmt::format("kimi_k3: hidden {}, vocab {}, latent {}, AttnRes blocks of {}, {}; {}", hidden, s.vocab,
                          t["routed_expert_hidden_size"].get<int>(), t["attn_res_block_size"].get<int>(), att, moe);
  return s;
}

}  // namespace rill::testing
