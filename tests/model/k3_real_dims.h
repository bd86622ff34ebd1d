// A Kimi K3 at the real head dims (MLA 2 heads of 128/64/128 over a 512 latent, KDA 2 x 128) with hidden 256
// and an MLA schedule of one isolated layer and an adjacent pair: the configuration of issue #15, where the
// CUDA path once diverged from the CPU at the second MLA layer.
#pragma once

#include "model/random_checkpoint.h"

namespace rill::testing {

inline nlohmann::ordered_json k3_real_dims_config() {
  nlohmann::ordered_json cfg = model::tiny_kimi_k3_config(1024, 1, 2);
  auto& t = cfg["text_config"];
  t["hidden_size"] = 256;
  t["num_hidden_layers"] = 7;
  t["intermediate_size"] = 512;
  t["activation_situ_beta"] = 4.0;
  t["activation_situ_linear_beta"] = 25.0;
  t["num_attention_heads"] = t["num_key_value_heads"] = 2;
  t["head_dim"] = 128;
  t["q_lora_rank"] = 64;
  t["mla_use_output_gate"] = true;
  t["linear_attn_config"]["num_heads"] = 2;
  t["linear_attn_config"]["gate_lower_bound"] = -5.0;
  t["linear_attn_config"]["kda_layers"] = {1, 2, 3, 5};
  t["linear_attn_config"]["full_attn_layers"] = {4, 6, 7};
  t["num_experts"] = 16;
  t["num_experts_per_token"] = 4;
  t["num_expert_group"] = 1;
  t["topk_group"] = 1;
  t["num_shared_experts"] = 2;
  t["moe_intermediate_size"] = 64;
  t["routed_expert_hidden_size"] = 128;
  t["latent_moe_use_norm"] = true;
  t["routed_scaling_factor"] = 1.5;
  t["first_k_dense_replace"] = 1;
  t["attn_res_block_size"] = 3;
  return cfg;
}

}  // namespace rill::testing
