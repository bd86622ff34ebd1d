// Kimi K3 configs: the released config.json (nested text_config, quantization_config inside it), the
// transformers-style spellings, and every malformed variant rejected with the field named.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/kimi_k3_config.h"
#include "model/random_checkpoint.h"

namespace rill::model {
namespace {

using Json = nlohmann::ordered_json;

Result<ModelConfig> parse(const Json& j) {
  return ModelConfig::from_json(j, "config.json");
}

void expect_error(const Json& j, const std::string& fragment) {
  auto r = parse(j);
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(KimiK3Config, ParsesTheReleasedConfig) {
  auto r = parse(kimi_k3_released_config());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.family, ModelFamily::KimiK3);
  EXPECT_EQ(c.tensor_prefix, "language_model.");
  EXPECT_EQ(c.n_layers, 93);
  EXPECT_EQ(c.hidden_size, 7168);
  std::vector<int> mla;
  for (int i = 0; i < c.n_layers; ++i)
    if (c.layer_kinds[size_t(i)] == LayerKind::Mla) mla.push_back(i);
  std::vector<int> want;
  for (int i = 3; i <= 91; i += 4) want.push_back(i);
  want.push_back(92);  // the double-MLA tail (spec §1.2)
  EXPECT_EQ(mla, want);
  EXPECT_EQ(c.n_layers_of(LayerKind::Kda), 69);
  EXPECT_EQ(c.ffn_kinds[0], FfnKind::Dense);
  EXPECT_EQ(c.ffn_kinds[92], FfnKind::Moe);
  EXPECT_EQ(c.activation, GluActivation::Situ);
  EXPECT_FLOAT_EQ(c.situ_beta, 4.0f);
  EXPECT_FLOAT_EQ(c.situ_linear_beta, 25.0f);
  EXPECT_EQ(c.kda.n_heads, 96);
  ASSERT_TRUE(c.kda.gate_lower_bound.has_value());
  EXPECT_FLOAT_EQ(*c.kda.gate_lower_bound, -5.0f);
  EXPECT_TRUE(c.kda.full_rank_output_gate);
  EXPECT_EQ(c.mla.q_lora_rank, 1536);
  EXPECT_TRUE(c.mla.output_gate);
  EXPECT_FLOAT_EQ(c.mla.latent_norm_eps, 1e-6f);
  EXPECT_EQ(c.moe.n_experts, 896);
  EXPECT_EQ(c.moe.n_experts_per_token, 16);
  EXPECT_EQ(c.moe.n_shared_experts, 2);
  EXPECT_EQ(c.moe.latent_size, 3584);
  EXPECT_TRUE(c.moe.latent_norm);
  EXPECT_FLOAT_EQ(c.moe.routed_scaling_factor, 1.0f);
  EXPECT_EQ(c.attn_res_block_size, 12);
  EXPECT_EQ(c.attn_res_max_blocks(), 8);  // snapshots at 0, 12, ..., 84
  EXPECT_TRUE(c.mxfp4_experts);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{163586});
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.kv_bytes_per_token(2), 24 * 576 * 2);  // spec §4: 27.6 KB / token
}

TEST(KimiK3Config, TheTinyConfigParses) {
  auto r = parse(tiny_kimi_k3_config(512, 1, 2));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->family, ModelFamily::KimiK3);
  EXPECT_EQ(r->attn_res_max_blocks(), 3);
  EXPECT_EQ(r->layer_kinds[5], LayerKind::Mla);
  EXPECT_EQ(r->layer_kinds[6], LayerKind::Mla);
}

TEST(KimiK3Config, TransformersSpellingsGiveTheSameModel) {
  Json j = kimi_k3_released_config();
  Json& t = j["text_config"];
  Json& lac = t["linear_attn_config"];
  lac.erase("gate_lower_bound");
  lac.erase("use_full_rank_gate");
  lac["forget_gate_lower_bound"] = -5.0;
  lac["use_full_rank_output_gate"] = true;
  lac.erase("kda_layers");
  lac.erase("full_attn_layers");
  Json types = Json::array();
  for (int i = 0; i < 93; ++i)
    types.push_back((i + 1) % 4 == 0 || i == 92 ? "full_attention" : "linear_attention");
  t["layer_types"] = types;
  t.erase("num_experts");
  t["n_routed_experts"] = 896;
  t.erase("num_experts_per_token");
  t["num_experts_per_tok"] = 16;
  t.erase("moe_renormalize");
  t["norm_topk_prob"] = true;
  t.erase("moe_router_activation_func");
  t["scoring_func"] = "sigmoid";
  auto a = parse(kimi_k3_released_config()), b = parse(j);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().to_string();
  EXPECT_EQ(a->layer_kinds, b->layer_kinds);
  EXPECT_EQ(b->kda.gate_lower_bound, a->kda.gate_lower_bound);
  EXPECT_EQ(b->kda.full_rank_output_gate, a->kda.full_rank_output_gate);
  EXPECT_EQ(b->moe.n_experts, a->moe.n_experts);
  EXPECT_EQ(b->moe.n_experts_per_token, a->moe.n_experts_per_token);
}

TEST(KimiK3Config, QuantizationConfigAtTheRootIsAccepted) {
  Json j = kimi_k3_released_config();
  j["quantization_config"] = j["text_config"]["quantization_config"];
  j["text_config"].erase("quantization_config");
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->mxfp4_experts);
  j["text_config"]["quantization_config"] = j["quantization_config"];
  j["text_config"]["quantization_config"]["format"] = "float-quantized";
  expect_error(j, "contradicts text_config.quantization_config");
}

TEST(KimiK3Config, WithoutQuantizationConfigTheExpertsAreDense) {
  Json j = kimi_k3_released_config();
  j["text_config"].erase("quantization_config");
  auto r = parse(j);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->mxfp4_experts);
}

TEST(KimiK3Config, MalformedConfigsNameTheField) {
  Json j = kimi_k3_released_config();
  j.erase("text_config");
  expect_error(j, "model_type \"kimi_k3\" needs a \"text_config\" object");
  j["text_config"] = "kimi_linear";
  expect_error(j, "needs a \"text_config\" object");

  j = kimi_k3_released_config();
  j["text_config"]["model_type"] = "deepseek_v3";
  expect_error(j, "text_config.model_type must be \"kimi_linear\"");

  j = kimi_k3_released_config();
  j["text_config"].erase("hidden_size");
  expect_error(j, "missing field text_config.hidden_size");

  j = kimi_k3_released_config();
  j["text_config"].erase("activation_situ_linear_beta");  // never default a SiTU beta (spec §7.10)
  expect_error(j, "missing field text_config.activation_situ_linear_beta");

  j = kimi_k3_released_config();
  j["text_config"].erase("attn_res_block_size");
  expect_error(j, "text_config.attn_res_block_size must be a positive integer");
}

TEST(KimiK3Config, UnsupportedQuantizationFormatsAreRejected) {
  auto with = [](const std::function<void(Json&)>& edit) {
    Json j = kimi_k3_released_config();
    edit(j["text_config"]["quantization_config"]);
    return j;
  };
  // An FP8 block re-quantization (spec §1.4: third-party, not the official checkpoint).
  expect_error(
      with([](Json& q) { q["format"] = "float-quantized"; }),
      "text_config.quantization_config: quant_method \"compressed-tensors\" with format \"float-quantized\" "
      "is not supported");
  expect_error(with([](Json& q) { q["quant_method"] = "quark"; }), "quant_method \"quark\"");
  expect_error(with([](Json& q) {
                 q["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 4}};
               }),
               "text_config.quantization_config.config_groups.group_0.input_activations must be null");
  expect_error(with([](Json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 8; }),
               "config_groups.group_0.weights.num_bits = 8 is not MXFP4");
  expect_error(with([](Json& q) { q["config_groups"]["group_0"]["weights"]["group_size"] = 16; }),
               "weights.group_size = 16 is not MXFP4");
  expect_error(with([](Json& q) { q["quantization_status"] = "frozen"; }),
               "quantization_status must be \"compressed\"");
  expect_error(with([](Json& q) { q = "mxfp4"; }), "text_config.quantization_config must be an object");
  Json j = kimi_k3_released_config();
  j["text_config"]["routed_expert_hidden_size"] = 3580;
  expect_error(j, "divisible by the group size 32");
}

TEST(KimiK3Config, K3FeaturesAreRefusedUnderKimiLinear) {
  Json t = kimi_k3_released_config()["text_config"];
  t.erase("quantization_config");
  expect_error(t, "attn_res_block_size (Block AttnRes) is only supported with model_type \"kimi_k3\"");
  t.erase("attn_res_block_size");
  t["quantization_config"] = kimi_k3_released_config()["text_config"]["quantization_config"];
  expect_error(t, "quantization_config is not supported for kimi_linear");
}

}  // namespace
}  // namespace rill::model
