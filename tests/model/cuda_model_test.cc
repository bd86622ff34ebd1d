// The CUDA backend against the CPU reference at model level (design.md §5 tolerances): every committed
// transformers fixture and a freshly drawn random model per run give per-position logits with relative L2
// error within the bounds stated in logit_compare.h; chunked, one-shot and token-by-token prefill agree on the
// GPU; a ragged batch equals its sequences run alone. Skipped where no GPU is present.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "model/fixture.h"
#include "model/logit_compare.h"
#include "model/random_checkpoint.h"
#include "test_seed.h"

namespace rill {
namespace {

using testing::ReplayedRun;

// Every named intermediate of a forward pass, CUDA against the CPU, in order: names the first tensor that
// diverges, for a prefill, a 16-token chunk continuing it and a single decode token.
TEST(CudaTaps, EveryIntermediateMatchesTheCpu) {
  const auto dir = testing::data_dir() / "kimi_linear_tiny_b";
  testing::Reference ref(dir);
  testing::expect_taps_match(dir, ref.ints("prompt_3"), {{0, 48}, {48, 16}, {64, 1}});
}

class CudaFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaFixture, MatchesCpuReference) {
  const auto dir = testing::data_dir() / GetParam();
  testing::Reference ref(dir);
  std::vector<ReplayedRun> runs;
  for (int i = 0; i < ref.n_prompts(); ++i) runs.push_back({ref.ints("prompt_" + std::to_string(i)), {}});
  testing::expect_gpu_matches_cpu(dir, runs);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixture, ::testing::ValuesIn(testing::kimi_linear_fixtures()));

// A model drawn fresh every run: random shape options and weights (seed printed).
TEST(CudaRandomModel, MatchesCpuReference) {
  const uint32_t seed = rill::testing::test_seed();
  std::printf("[ seed     ] %u (RILL_TEST_SEED)\n", seed);
  std::mt19937 rng(seed);
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(R"({
    "model_type": "kimi_linear", "vocab_size": 700, "hidden_size": 96, "intermediate_size": 160,
    "num_hidden_layers": 5, "num_attention_heads": 2, "num_key_value_heads": 2, "hidden_act": "silu",
    "rms_norm_eps": 1e-5, "first_k_dense_replace": 1, "moe_intermediate_size": 48, "num_experts": 16,
    "num_experts_per_token": 4, "num_shared_experts": 1, "moe_renormalize": true, "routed_scaling_factor": 2.446,
    "num_expert_group": 1, "topk_group": 1, "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": true,
    "linear_attn_config": {"head_dim": 128, "num_heads": 2, "short_conv_kernel_size": 4,
                           "kda_layers": [1, 2, 4], "full_attn_layers": [3, 5]},
    "eos_token_id": 2})");
  if (rng() % 2) cfg["q_lora_rank"] = 48;
  if (rng() % 2) cfg["num_expert_group"] = 4, cfg["topk_group"] = 2;
  if (rng() % 2) cfg["moe_renormalize"] = false;
  cfg["linear_attn_config"]["num_heads"] = 1 + int(rng() % 3);
  cfg["num_attention_heads"] = 1 + int(rng() % 3);
  const auto dir = std::filesystem::temp_directory_path() / ("rill_cuda_random_" + std::to_string(seed));
  ASSERT_TRUE(model::write_random_checkpoint(dir, cfg, seed).ok());
  std::vector<ReplayedRun> runs;
  for (int n : {1, 9, 64, 130}) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& x : ids) x = int32_t(rng() % 700);
    runs.push_back({ids, {}});
  }
  testing::expect_gpu_matches_cpu(dir, runs);
  std::filesystem::remove_all(dir);
}

// Chunked, one-shot and token-by-token prefill on the GPU agree (routing replayed from the one-shot run).
TEST(CudaConsistency, ChunkedOneShotAndTokenByTokenAgreeOnTheGpu) {
  const auto dir = testing::data_dir() / "kimi_linear_tiny_b";
  testing::Pair p;
  std::string why;
  if (!testing::load_pair(dir, &p, &why)) GTEST_SKIP() << why;
  testing::Reference ref(dir);
  testing::expect_chunked_matches_one_shot(*p.gpu_model, ref.ints("prompt_4"), {1, 3, 16, 64, 100});
}

TEST(CudaConsistency, RaggedBatchEqualsSequencesAlone) {
  const auto dir = testing::data_dir() / "kimi_linear_tiny_a";
  testing::Pair p;
  std::string why;
  if (!testing::load_pair(dir, &p, &why)) GTEST_SKIP() << why;
  const int64_t V = p.gpu_model->config().vocab_size;
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> tokens;
  for (int n : {120, 5, 66}) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(V));
    tokens.push_back(t);
  }
  testing::expect_ragged_batch_close_to_alone(*p.gpu, *p.gpu_model, tokens,
                                              {{{0, 60}, {1, 2}}, {{0, 60}, {1, 1}, {2, 66}}, {{1, 1}}, {{1, 1}}});
}

}  // namespace
}  // namespace rill
