// ModelConfig parsing: both config forms, the derived quantities of the real 48B model, and bad configs.
#include <gtest/gtest.h>

#include "model/config.h"
#include "model/kimi_linear_48b_config.h"

namespace rill::model {
namespace {

using Json = nlohmann::ordered_json;

Json base() { return Json::parse(kKimiLinear48bConfig); }

Result<ModelConfig> parse(const Json& j) { return ModelConfig::from_json(j, "config.json"); }

void expect_error(const Json& j, const std::string& fragment, StatusCode code = StatusCode::InvalidArgument) {
  auto r = parse(j);
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(ModelConfig, ParsesTheReleasedKimiLinear48b) {
  auto r = parse(base());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.n_layers, 27);
  std::vector<int> mla;
  for (int i = 0; i < c.n_layers; ++i)
    if (c.layer_kinds[size_t(i)] == LayerKind::Mla) mla.push_back(i);
  EXPECT_EQ(mla, (std::vector<int>{3, 7, 11, 15, 19, 23, 26}));  // spec §1.1, 0-based
  EXPECT_EQ(c.ffn_kinds[0], FfnKind::Dense);
  EXPECT_EQ(c.ffn_kinds[1], FfnKind::Moe);
  EXPECT_EQ(c.kda.n_heads, 32);
  EXPECT_FALSE(c.kda.gate_lower_bound.has_value());
  EXPECT_EQ(c.mla.q_lora_rank, 0);
  EXPECT_EQ(c.moe.n_experts, 256);
  EXPECT_FLOAT_EQ(c.moe.routed_scaling_factor, 2.446f);
  EXPECT_FLOAT_EQ(c.mla.latent_norm_eps, 1e-6f);
  EXPECT_EQ(c.kv_bytes_per_token(2), 8064);                     // 7 x 576 x 2
  EXPECT_EQ(c.kda_state_bytes_per_sequence(), 40LL << 20);      // 20 x 32 x 128 x 128 x 4 = 40 MiB
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{163586});
}

TEST(ModelConfig, TransformersFormGivesTheSameModel) {
  Json j = base();
  Json t = j;
  t.erase("linear_attn_config");
  t.erase("num_experts");
  t.erase("num_experts_per_token");
  t.erase("moe_renormalize");
  t.erase("num_expert_group");
  t.erase("num_shared_experts");
  t.erase("first_k_dense_replace");
  Json types = Json::array(), mlp = Json::array();
  for (int i = 0; i < 27; ++i) {
    const bool is_mla = (i + 1) % 4 == 0 || i == 26;
    types.push_back(is_mla ? "full_attention" : "linear_attention");
    mlp.push_back(i == 0 ? "dense" : "sparse");
  }
  t["layer_types"] = types;
  t["mlp_layer_types"] = mlp;
  t["n_routed_experts"] = 256;
  t["num_experts_per_tok"] = 8;
  t["norm_topk_prob"] = true;
  t["n_group"] = 1;
  t["n_shared_experts"] = 1;
  t["linear_head_dim"] = 128;
  t["linear_num_heads"] = 32;
  t["linear_conv_kernel_dim"] = 4;
  auto a = parse(j), b = parse(t);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().to_string();
  EXPECT_EQ(a->layer_kinds, b->layer_kinds);
  EXPECT_EQ(a->ffn_kinds, b->ffn_kinds);
  EXPECT_EQ(a->moe.n_experts, b->moe.n_experts);
  EXPECT_EQ(a->moe.n_experts_per_token, b->moe.n_experts_per_token);
  EXPECT_EQ(a->kda.n_heads, b->kda.n_heads);
  EXPECT_EQ(a->kda.conv_kernel, b->kda.conv_kernel);
}

TEST(ModelConfig, BothFormsMustAgree) {
  Json j = base();
  Json types = Json::array();
  for (int i = 0; i < 27; ++i) types.push_back("linear_attention");
  j["layer_types"] = types;
  expect_error(j, "contradicts");
  Json k = base();
  k["n_routed_experts"] = 128;
  expect_error(k, "contradicts");
}

TEST(ModelConfig, UnknownAndUnsupportedModelTypes) {
  Json j = base();
  j["model_type"] = "llama";
  expect_error(j, "unsupported model_type \"llama\"");
  j.erase("model_type");
  expect_error(j, "missing \"model_type\"");
  Json k3 = {{"model_type", "kimi_k3"}};  // K3 itself: kimi_k3_config_test.cc
  expect_error(k3, "needs a \"text_config\" object");
  expect_error(Json::array(), "must be a JSON object");
}

TEST(ModelConfig, LayerListsMustBeOneBasedIntegers) {
  Json j = base();
  j["linear_attn_config"]["kda_layers"][2] = 2.5;
  expect_error(j, "linear_attn_config.kda_layers[2] must be an integer");
  j = base();
  j["linear_attn_config"]["full_attn_layers"][0] = "4";
  expect_error(j, "full_attn_layers[0] must be an integer");
  j = base();
  j["linear_attn_config"]["full_attn_layers"][6] = 28;
  expect_error(j, "outside 1..num_hidden_layers");
  j = base();
  j["linear_attn_config"]["full_attn_layers"][0] = 1;  // layer 1 now in both lists, layer 4 in neither
  expect_error(j, "listed twice");
  j = base();
  j["linear_attn_config"]["kda_layers"] = "1-26";
  expect_error(j, "must be a list");
}

TEST(ModelConfig, MissingAndMistypedFields) {
  Json j = base();
  j.erase("hidden_size");
  expect_error(j, "missing field hidden_size");
  j = base();
  j["num_experts_per_token"] = 300;
  expect_error(j, "num_experts_per_token (300) must be in 1..num_experts (256)");
  j = base();
  j["moe_renormalize"] = "yes";
  expect_error(j, "moe_renormalize must be true or false");
  j = base();
  j["num_expert_group"] = 3;
  expect_error(j, "must divide num_experts");
  j = base();
  j["hidden_act"] = "situ";
  expect_error(j, "missing field activation_situ_beta");
  j = base();
  j["mla_use_nope"] = false;
  expect_error(j, "not supported");
}

TEST(ModelConfig, ReportsEveryProblemAtOnce) {
  Json j = base();
  j.erase("hidden_size");
  j["vocab_size"] = "big";
  auto r = parse(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hidden_size"), std::string::npos);
  EXPECT_NE(r.status().message().find("vocab_size"), std::string::npos);
}

}  // namespace
}  // namespace rill::model
