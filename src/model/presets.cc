#include "model/presets.h"

namespace rill::model {
namespace {

nlohmann::ordered_json kimi_linear_48b() {
  return nlohmann::ordered_json::parse(R"({
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
    "vocab_size": 163840, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 27,
    "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 72, "hidden_act": "silu",
    "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "moe_intermediate_size": 1024, "num_experts": 256, "num_experts_per_token": 8, "num_shared_experts": 1,
    "moe_router_activation_func": "sigmoid", "moe_renormalize": true, "routed_scaling_factor": 2.446,
    "use_grouped_topk": true, "num_expert_group": 1, "topk_group": 1, "q_lora_rank": null, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": true,
    "num_nextn_predict_layers": 0,
    "linear_attn_config": {"head_dim": 128, "num_heads": 32, "short_conv_kernel_size": 4,
      "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
      "full_attn_layers": [4, 8, 12, 16, 20, 24, 27]},
    "model_max_length": 1048576, "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839})");
}

}  // namespace

std::vector<std::string> preset_names() { return {"kimi-linear-48b"}; }

Result<nlohmann::ordered_json> preset_config(std::string_view name) {
  if (name == "kimi-linear-48b") return kimi_linear_48b();
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown preset \"{}\" (known: {})", name, known);
}

}  // namespace rill::model
