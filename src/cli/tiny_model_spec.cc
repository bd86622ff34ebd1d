#include "cli/tiny_model_spec.h"

namespace rill::cli {

namespace {
constexpr int kRanks = 1024;  // BPE ranks; the 256-id control block follows, as in the Kimi vocabulary
}

nlohmann::ordered_json tiny_model_config() {
  return {
      {"architectures", {"KimiLinearForCausalLM"}},
      {"model_type", "kimi_linear"},
      {"vocab_size", kRanks + 256},
      {"hidden_size", 128},
      {"intermediate_size", 256},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 2},
      {"head_dim", 64},
      {"hidden_act", "silu"},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", false},
      {"first_k_dense_replace", 1},
      {"moe_layer_freq", 1},
      {"moe_intermediate_size", 64},
      {"num_experts", 8},
      {"num_experts_per_token", 2},
      {"num_shared_experts", 1},
      {"moe_router_activation_func", "sigmoid"},
      {"moe_renormalize", true},
      {"routed_scaling_factor", 2.446},
      {"use_grouped_topk", true},
      {"num_expert_group", 1},
      {"topk_group", 1},
      {"q_lora_rank", nullptr},
      {"kv_lora_rank", 512},
      {"qk_nope_head_dim", 128},
      {"qk_rope_head_dim", 64},
      {"v_head_dim", 128},
      {"mla_use_nope", true},
      {"num_nextn_predict_layers", 0},
      {"linear_attn_config",
       {{"head_dim", 128}, {"num_heads", 2}, {"short_conv_kernel_size", 4}, {"kda_layers", {1, 2, 4}},
        {"full_attn_layers", {3}}}},
      {"model_max_length", 65536},
      {"bos_token_id", kRanks + 0},
      {"eos_token_id", kRanks + 2},
      {"pad_token_id", kRanks + 255},
      {"torch_dtype", "bfloat16"},
  };
}

}  // namespace rill::cli
