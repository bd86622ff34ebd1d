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

// compressed-tensors MXFP4 for the routed experts only (spec §1.4).
nlohmann::ordered_json mxfp4_quantization() {
  return nlohmann::ordered_json::parse(R"({
    "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
      "weights": {"type": "float", "num_bits": 4, "strategy": "group", "group_size": 32, "symmetric": true,
                  "dynamic": false, "scale_dtype": "torch.uint8", "actorder": null, "block_structure": null},
      "input_activations": null, "output_activations": null}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
               "re:.*lm_head.*", "re:.*vision_tower.*", "re:.*mm_projector.*"]})");
}

// The multimodal root of a K3 config.json around its text decoder (quantization_config nested inside it).
nlohmann::ordered_json k3_root(nlohmann::ordered_json text, bool vision = false) {
  text["quantization_config"] = mxfp4_quantization();
  nlohmann::ordered_json root = {{"architectures", {"KimiK3ForConditionalGeneration"}},
                                 {"model_type", "kimi_k3"},
                                 {"bos_token_id", 163584},
                                 {"eos_token_id", 163586},
                                 {"pad_token_id", 163839},
                                 {"media_placeholder_token_id", 163605},
                                 {"tie_word_embeddings", false},
                                 {"text_config", text}};
  if (vision)
    root["vision_config"] = {{"patch_size", 14}, {"vt_hidden_size", 1024}, {"mm_projector_type", "patchmergerv2"}};
  return root;
}

// The released Kimi K3 config.json (spec §1.2 and §1.4): 93 layers, MLA at every fourth 1-based layer and at
// 93, the rest KDA; the text decoder in Moonshot form (1-based layer lists).
nlohmann::ordered_json kimi_k3() {
  using Json = nlohmann::ordered_json;
  Json kda = Json::array(), full = Json::array();
  for (int l = 1; l <= 93; ++l) (l % 4 == 0 || l == 93 ? full : kda).push_back(l);
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
  text["linear_attn_config"] = {{"head_dim", 128},        {"num_heads", 96},          {"short_conv_kernel_size", 4},
                                {"gate_lower_bound", -5.0}, {"use_full_rank_gate", true}, {"full_attn_layers", full},
                                {"kda_layers", kda}};
  return k3_root(text, /*vision=*/true);
}

// Kimi K3 (spec §1.2) at full width, cut to the 0-based real layers 4..7 so that it fits one H200 (~139 GiB):
// KDA, KDA, KDA, MLA, one period of the real 3:1 schedule (MLA at 3, 7, 11, ...), all latent MoE with MXFP4
// experts; the dense layer 0 and the double-MLA tail 91, 92 are left out. Device bytes (spec §2.3, MXFP4
// 0.53 B/param: 16.5 MB packed + 1.0 MB E8M0 scales per expert):
//   embed_tokens + lm_head, bf16         2 x 163840 x 7168 x 2 B    =  4.70 GB
//   MoE per layer: 896 experts           896 x 17.55 MB             = 15.72 GB
//                  router, latent down/up, 2 shared experts, bf16   =  0.38 GB
//   KDA attention per layer, bf16        443.6 M params             =  0.89 GB  -> 16.99 GB per KDA layer
//   MLA attention per layer, bf16        232.2 M params             =  0.46 GB  -> 16.57 GB per MLA layer
// Four layers: 3 x 16.99 + 16.57 + 4.70 = 72.2 GB (67.3 GiB), leaving room for an 8K-token prefill's
// workspace (several GB, mostly the grouped experts' buffers) and the caches of 32 sequences at 4K (~0.8 GB).
// Two periods (8 layers, 139.8 GB = 130.2 GiB) would leave under 9 GiB for those and CUDA itself. AttnRes
// keeps block size 12, so the slice is inside one block like the real layers 4..7: its depth mixes see the
// embedding snapshot and the partial sum (the deepest real layers mix up to nine candidates; the op benchmarks
// time that mix separately), and the slice's first layer skips the attention-side mix the real layer 4 does.
nlohmann::ordered_json kimi_k3_slice() {
  using Json = nlohmann::ordered_json;
  Json text = Json::parse(R"({
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "vocab_size": 163840,
    "hidden_size": 7168, "num_hidden_layers": 4, "intermediate_size": 33792, "num_attention_heads": 96,
    "num_key_value_heads": 96, "head_dim": 74, "hidden_act": "situ", "activation_situ_beta": 4.0,
    "activation_situ_linear_beta": 25.0, "rms_norm_eps": 1e-05, "max_position_embeddings": 1048576,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "mla_use_nope": true, "mla_use_output_gate": true, "first_k_dense_replace": 0, "moe_layer_freq": 1,
    "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2, "moe_intermediate_size": 3072,
    "routed_expert_hidden_size": 3584, "latent_moe_use_norm": true, "moe_router_activation_func": "sigmoid",
    "moe_renormalize": true, "routed_scaling_factor": 1.0, "use_grouped_topk": true, "num_expert_group": 1,
    "topk_group": 1, "topk_method": "noaux_tc", "num_nextn_predict_layers": 0, "attn_res_block_size": 12,
    "tie_word_embeddings": false, "bos_token_id": 163584, "eos_token_id": 163586, "pad_token_id": 163839,
    "linear_attn_config": {"head_dim": 128, "num_heads": 96, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
      "use_full_rank_gate": true, "kda_layers": [1, 2, 3], "full_attn_layers": [4]}})");
  return k3_root(text);
}

}  // namespace

std::vector<std::string> preset_names() { return {"kimi-linear-48b", "kimi-k3", "kimi-k3-slice"}; }

Result<nlohmann::ordered_json> preset_config(std::string_view name) {
  if (name == "kimi-linear-48b") return kimi_linear_48b();
  if (name == "kimi-k3") return kimi_k3();
  if (name == "kimi-k3-slice") return kimi_k3_slice();
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("unknown preset \"{}\" (known: {})", name, known);
}

}  // namespace rill::model
