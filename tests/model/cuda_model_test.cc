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
#include "model/sequence_session.h"
#include "test_backend_options.h"
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

// A model drawn fresh every run from the shape space of shape_fuzz.h (seed and shape printed): prompts of 1 to 130
// tokens (decode and prefill paths) followed by decode steps, within the model-level bounds.
// RILL_FUZZ_RUNS=N draws N models (seeds seed, seed + 1, ...) in one run and prints the spread.
TEST(CudaRandomModel, MatchesCpuReference) {
  testing::expect_fuzzed_models_match(testing::fuzz_kimi_linear, testing::kKimiLinearBounds, "cuda_random");
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

// decode_fusion folds each residual add + RMSNorm into the decode GEMV that reads it and the router's selection
// into its logits GEMV, with the same arithmetic as the separate kernels (src/backend/cuda/README.md): a
// prefill and then decode steps (T = 1, the fused paths) give bit-identical logits with the fusions on and off.
TEST(CudaDecodeFusion, LogitsIdenticalOnAndOff) {
  const auto dir = testing::data_dir() / "kimi_linear_tiny_b";
  testing::Reference ref(dir);
  const std::vector<int32_t> ids = ref.ints("prompt_3");
  ASSERT_GE(ids.size(), 24u);
  std::vector<std::vector<float>> logits[2];
  for (int on = 0; on < 2; ++on) {
    auto be = testing::make_test_backend("cuda", on ? "decode_fusion=1" : "decode_fusion=0");
    if (!be.ok()) GTEST_SKIP() << be.status().message();
    std::unique_ptr<model::Model> m = testing::load_fixture_model(dir, **be);
    ASSERT_TRUE(m);
    auto s = model::SequenceSession::create(*m, 512);
    ASSERT_TRUE(s.ok());
    const size_t prefill = ids.size() - 8;
    auto l = s->feed(std::span(ids).first(prefill), 0, false);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    logits[on].push_back(*l);
    for (size_t t = prefill; t < ids.size(); ++t) {  // one decode step per token
      l = s->feed(std::span(ids).subspan(t, 1), 0, false);
      ASSERT_TRUE(l.ok()) << l.status().to_string();
      logits[on].push_back(*l);
    }
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  for (size_t i = 0; i < logits[0].size(); ++i)
    EXPECT_EQ(logits[1][i], logits[0][i]) << (i == 0 ? "prefill" : "decode step " + std::to_string(i));
}

}  // namespace
}  // namespace rill
