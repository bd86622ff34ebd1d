// Absurd config.json values (issue #14 item 8): every integer is range-checked as a 64-bit value before it is
// narrowed, so a value that would wrap, a negative width or a size past the sanity bounds is an error naming
// the field and the value; and a model whose weights cannot fit is refused with "needed vs available" before
// anything is allocated, not with std::bad_alloc.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/backend.h"
#include "model/config.h"
#include "model/kimi_k3_config.h"
#include "model/kimi_linear_48b_config.h"
#include "model/model.h"

namespace rill::model {
namespace {

using Json = nlohmann::ordered_json;

Json kimi_linear() {
  return Json::parse(kKimiLinear48bConfig);
}

void expect_error(const Json& j, const std::string& fragment) {
  auto r = ModelConfig::from_json(j, "config.json");
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(r.status().code(), StatusCode::InvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

constexpr int64_t k2Pow32 = int64_t(1) << 32;

TEST(ConfigLimits, AValueThatWouldWrapIsRefusedNotNarrowed) {
  Json j = kimi_linear();
  j["hidden_size"] = k2Pow32 + 128;  // int32 narrowing would make it 128, a valid-looking width
  expect_error(j, "hidden_size = 4294967424 is outside 0..65536");

  j = kimi_linear();
  j["num_hidden_layers"] = uint64_t(18446744073709551615ull);  // larger than int64: would read as -1
  expect_error(j, "num_hidden_layers = 18446744073709551615 is outside 0..1024");

  j = kimi_linear();
  j["eos_token_id"] = k2Pow32 + 163586;  // would wrap to the real EOS id
  expect_error(j, "eos_token_id = 4295130882 is outside 0..16777215");
  j["eos_token_id"] = Json::array({163586, k2Pow32 + 2});
  expect_error(j, "eos_token_id[1] = 4294967298 is outside 0..16777215");

  j = kimi_linear();
  j["bos_token_id"] = -k2Pow32;
  expect_error(j, "bos_token_id = -4294967296 is outside 0..16777215");
}

TEST(ConfigLimits, SizesPastTheSanityBoundsNameTheFieldAndTheValue) {
  Json j = kimi_linear();
  j["num_experts"] = 1000000000;
  expect_error(j, "num_experts = 1000000000 is outside 0..4096");
  j = kimi_linear();
  j["vocab_size"] = (1 << 24) + 1;
  expect_error(j, "vocab_size = 16777217 is outside 0..16777216");
  j = kimi_linear();
  j["vocab_size"] = -5;
  expect_error(j, "vocab_size = -5 is outside 0..16777216");
  j = kimi_linear();
  j["moe_intermediate_size"] = int64_t(1) << 40;
  expect_error(j, "moe_intermediate_size = 1099511627776 is outside 0..1048576");
  j = kimi_linear();
  j["linear_attn_config"]["num_heads"] = 5000;
  expect_error(j, "linear_attn_config.num_heads = 5000 is outside 0..1024");
  j = kimi_linear();
  j["model_max_length"] = k2Pow32;  // positions are int32
  expect_error(j, "model_max_length = 4294967296 is outside 1..2147483647");
  j = kimi_linear();
  j["qk_rope_head_dim"] = -64;
  expect_error(j, "qk_rope_head_dim = -64 is outside 0..1024");
}

TEST(ConfigLimits, FloatsMustBeFiniteSinglePrecision) {
  Json j = kimi_linear();
  j["routed_scaling_factor"] = 1e39;  // a finite double, infinite as the float the model keeps
  expect_error(j, "routed_scaling_factor = 1e+39 is not a finite 32-bit float");
  j = kimi_linear();
  j["rms_norm_eps"] = 1e300;
  expect_error(j, "rms_norm_eps = 1e+300 is not a finite 32-bit float");
  j = kimi_linear();
  j["linear_attn_config"]["gate_lower_bound"] = -1e39;  // -inf as a float would pass "must be negative"
  expect_error(j, "gate_lower_bound must be a finite number, got -1e+39");
}

// Issue #32: float fields in range, not only finite.
TEST(ConfigLimits, FloatRanges) {
  Json j = kimi_linear();
  j["rope_theta"] = 0;
  expect_error(j, "rope_theta must be positive, got 0");
  j = kimi_linear();
  j["rope_theta"] = -10000.0;
  expect_error(j, "rope_theta must be positive, got -10000");
  j = kimi_linear();
  j["rms_norm_eps"] = 0.0;
  expect_error(j, "rms_norm_eps must be in (0, 1], got 0");
  j = kimi_linear();
  j["rms_norm_eps"] = 2.0;
  expect_error(j, "rms_norm_eps must be in (0, 1], got 2");
  j = kimi_linear();
  j["routed_scaling_factor"] = -1.0;
  expect_error(j, "routed_scaling_factor must be positive, got -1");
  j = kimi_linear();
  j["rope_scaling"] = Json{{"type", "yarn"}, {"factor", 0}};
  expect_error(j, "rope_scaling.factor must be a positive number, got 0");
}

TEST(ConfigLimits, NestedK3FieldsAreCheckedWithTheirPath) {
  Json j = kimi_k3_released_config();
  j["text_config"]["hidden_size"] = k2Pow32 + 7168;
  expect_error(j, "text_config.hidden_size = 4294974464 is outside 0..65536");
  j = kimi_k3_released_config();
  j["text_config"]["routed_expert_hidden_size"] = -1;
  expect_error(j, "text_config.routed_expert_hidden_size = -1 is outside 0..65536");
  j = kimi_k3_released_config();
  j["text_config"]["num_experts"] = 4096;  // within the per-layer bound, but 4096 x 92 MoE layers is not
  expect_error(j,
               "num_experts (4096) x 92 MoE layers = 376832 routed experts exceeds the sanity bound 262144");
}

TEST(ConfigLimits, EveryReleasedShapeIsInsideTheBounds) {
  EXPECT_TRUE(ModelConfig::from_json(kimi_linear(), "48b").ok());
  EXPECT_TRUE(ModelConfig::from_json(kimi_k3_released_config(), "k3").ok());
}

// A config at the bounds parses, but its weights do not fit any machine: the dummy loader says how much it
// needs and how much the CPU has (MemAvailable) instead of throwing std::bad_alloc from the allocation.
TEST(ConfigLimits, DummyWeightsThatCannotFitAreRefusedBeforeAllocating) {
  Json j = kimi_linear();
  j["vocab_size"] = 1 << 24;
  j["hidden_size"] = 1 << 16;
  auto config = ModelConfig::from_json(j, "config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  auto be = backend::make_cpu_backend();
  const std::optional<size_t> available = be->available_memory();
  ASSERT_TRUE(available.has_value());
  // embed_tokens and lm_head alone: 2 x 2^24 x 2^16 bf16 values = 4 TiB.
  const double lower_bound = 2.0 * double(1 << 24) * double(1 << 16) * 2;
  if (double(*available) >= lower_bound) GTEST_SKIP() << "this machine has 4 TiB available";
  auto m = load_dummy_model(*config, *be, 1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::ResourceExhausted) << m.status().to_string();
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("the model's weights (--load-format dummy): "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" TiB needed, "), std::string::npos) << msg;
  EXPECT_NE(msg.find(" available on cpu"), std::string::npos) << msg;
  const double needed_tib = std::atof(msg.c_str() + msg.find("dummy): ") + 8);
  EXPECT_GE(needed_tib, 4.0) << msg;
}

}  // namespace
}  // namespace rill::model
