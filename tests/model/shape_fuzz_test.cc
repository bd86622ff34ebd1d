// The shape space the GPU model tests draw from (shape_fuzz.h), checked on the CPU for many seeds: every draw is
// a valid config of its family inside what the CUDA kernels are built for (the limits the CUDA backend reports,
// restated here from src/backend/cuda's constants), and its random checkpoint loads and runs on the CPU. And
// check_kernel_limits refuses each unsupported shape naming the config field.
#include <gtest/gtest.h>

#include <random>

#include "model/k3_checkpoint.h"
#include "model/kernel_limits.h"
#include "model/sequence_session.h"
#include "model/shape_fuzz.h"
#include "test_seed.h"

namespace rill::testing {
namespace {

// The CUDA backend's limits (CudaBackend::shape_limits), restated: the fuzzed space must stay inside them.
backend::KernelShapeLimits cuda_limits() {
  backend::KernelShapeLimits l;
  l.kda_head_dim = 128;
  l.kda_conv_kernel = 4;
  l.mla_nope = 128;
  l.mla_rope = 64;
  l.mla_v = 128;
  l.mla_kv_lora = 512;
  l.max_experts = 1024;
  l.max_groups = 32;
  l.max_attn_res_candidates = 64;
  return l;
}

void check_draws(FuzzedShape (*draw)(std::mt19937&), int n_loaded) {
  const uint32_t first = test_seed();
  std::printf("[ seed     ] %u (RILL_TEST_SEED)\n", first);
  auto cpu = backend::make_cpu_backend();
  for (int i = 0; i < 200; ++i) {
    std::mt19937 rng(first + uint32_t(i));
    const FuzzedShape s = draw(rng);
    SCOPED_TRACE(::testing::Message() << "seed " << first + uint32_t(i) << ": " << s.summary);
    auto c = model::ModelConfig::from_json(s.config, "fuzzed");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE(model::check_kernel_limits(*c, cuda_limits(), "cuda").ok());
    EXPECT_GE(c->n_layers_of(model::LayerKind::Mla), 1);
    EXPECT_GE(c->n_layers_of(model::LayerKind::Kda), 1);
    if (i >= n_loaded) continue;
    // A few draws all the way: checkpoint written, loaded and run on the CPU.
    TempDir dir("shape_fuzz_" + std::to_string(i));
    ASSERT_TRUE(model::write_random_checkpoint(dir.path(), s.config, first + uint32_t(i)).ok());
    auto m = model::load_model(dir.path(), *cpu);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_TRUE((*m)->reserve_workspace({16, 2, 16, 64}).ok());
    auto session = model::SequenceSession::create(**m, 64);
    ASSERT_TRUE(session.ok());
    std::vector<int32_t> ids(9);
    for (auto& x : ids) x = int32_t(rng() % uint32_t(s.vocab));
    auto logits = session->feed(ids, 0, false);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    for (float v : *logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(ShapeFuzz, KimiLinearDrawsAreValidAndSupported) { check_draws(fuzz_kimi_linear, 3); }
TEST(ShapeFuzz, KimiK3DrawsAreValidAndSupported) { check_draws(fuzz_kimi_k3, 3); }

TEST(KernelLimits, UnsupportedShapesAreRefusedNamingTheField) {
  std::mt19937 rng(3);
  const FuzzedShape base = fuzz_kimi_k3(rng);
  struct Case {
    std::function<void(nlohmann::ordered_json&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {[](auto& t) { t["linear_attn_config"]["head_dim"] = 64; }, "linear_attn_config.head_dim"},
      {[](auto& t) { t["v_head_dim"] = 64; }, "v_head_dim"},
      {[](auto& t) { t["kv_lora_rank"] = 256; }, "kv_lora_rank"},
      {[](auto& t) { t["qk_rope_head_dim"] = 32; }, "qk_rope_head_dim"},
      {[](auto& t) { t["num_experts"] = 2048, t["num_experts_per_token"] = 2, t["num_expert_group"] = 1; },
       "num_experts"},
      {[](auto& t) {
         t["num_experts"] = 128, t["num_experts_per_token"] = 2, t["num_expert_group"] = 64, t["topk_group"] = 2,
         t["use_grouped_topk"] = true;
       },
       "num_expert_group"},
      {[](auto& t) {
         std::vector<int> kda;
         for (int l = 1; l < 64; ++l) kda.push_back(l);
         t["attn_res_block_size"] = 1, t["num_hidden_layers"] = 64;
         t["linear_attn_config"]["kda_layers"] = kda, t["linear_attn_config"]["full_attn_layers"] = {64};
       },
       "attn_res_block_size"},
  };
  for (const Case& k : cases) {
    nlohmann::ordered_json cfg = base.config;
    k.edit(cfg["text_config"]);
    auto c = model::ModelConfig::from_json(cfg, "edited");
    ASSERT_TRUE(c.ok()) << k.field << ": " << c.status().to_string();
    const Status st = model::check_kernel_limits(*c, cuda_limits(), "cuda:0");
    ASSERT_FALSE(st.ok()) << k.field;
    EXPECT_NE(st.message().find(k.field), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("cuda:0"), std::string::npos) << st.message();
    EXPECT_TRUE(model::check_kernel_limits(*c, {}, "cpu").ok()) << "the CPU takes any shape: " << k.field;
  }
}

}  // namespace
}  // namespace rill::testing
