// The released Kimi K3 config.json (values from spec/kimi-architecture.md §1.2 and §1.4): the multimodal
// root, the text decoder in `text_config` (Moonshot form, 1-based layer lists) with the MXFP4
// quantization_config nested inside it.
#pragma once

#include <nlohmann/json.hpp>

inline nlohmann::ordered_json kimi_k3_released_config() {
  using Json = nlohmann::ordered_json;
  Json kda = Json::array(), full = Json::array();
  for (int l = 1; l <= 93; ++l) {
    if (l % 4 == 0 || l == 93)
      full.push_back(l);
    else
      kda.push_back(l);
  }
  Json quant = Json::parse(R"({
    "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
      "weights": {"type": "float", "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": true,
                  "dynamic": false, "scale_dtype": "torch.uint8", "actorder": null, "block_structure": null},
      "input_activations": null, "output_activations": null}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
               "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"]})");
  Json text = Json::parse(R"({
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": 163840,
    "hidden_size": 7168, "num_hidden_layers": 93, "intermediate_size": 33792, "num_attention_heads": 96,
    "num_key_value_heads": 96, "head_dim": 74, "hidden_act": "situ", "activation_situ_beta": 4.0,
    "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-05, "max_position_embeddings": 1048576,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "mla_use_nope": true, "mla_use_output_gate": true, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2, "moe_intermediate_size": 3072,
    "routed_expert_hidden_size": 3584, "latent_moe_use_norm": true, "moe_router_activation_func": "sigmoid",
    "moe_renormalize": true, "routed_scaling_factor": 1.0, "use_grouped_topk": true, "num_expert_group": 1,
    "topk_group": 1, "topk_method": "noaux_tc", "num_nextn_predict_layers": 0, "attn_res_block_size": 12,
    "tie_word_embeddings": false, "eos_token_id": 163586})");
  text["linear_attn_config"] = {{"head_dim", 128},
                                {"num_heads", 96},
                                {"short_conv_kernel_size", 4},
                                {"gate_lower_bound", -5.0},
                                {"use_full_rank_gate", true},
                                {"full_attn_layers", full},
                                {"kda_layers", kda}};
  text["quantization_config"] = quant;
  return {{"architectures", {"KimiK3ForConditionalGeneration"}},
          {"model_type", "kimi_k3"},
          {"bos_token_id", 163584},
          {"eos_token_id", 163586},
          {"pad_token_id", 163839},
          {"media_placeholder_token_id", 163605},
          {"tie_word_embeddings", false},
          {"text_config", text},
          {"vision_config",
           {{"patch_size", 14}, {"vt_hidden_size", 1024}, {"mm_projector_type", "patchmergerv2"}}}};
}
