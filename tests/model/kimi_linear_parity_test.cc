// CPU reference vs transformers 5.17 (fp32): logits of every prompt position, 12-token greedy
// continuations through the cache, and the logits of each decode step. Fixtures: tests/data/kimi_linear_tiny_*.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "model/fixture.h"
#include "model/sequence_session.h"

namespace rill {
namespace {

using testing::max_abs_diff;

class KimiLinearParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::data_dir() / GetParam();
    be_ = backend::make_cpu_backend();
    auto m = model::load_model(dir_, *be_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
    model::StepLimits lim;
    lim.max_tokens = 256;
    lim.max_seqs = 4;
    lim.max_logit_rows = 256;
    lim.max_context = 256;
    ASSERT_TRUE(model_->reserve_workspace(lim).ok());
  }
  std::filesystem::path dir_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<model::Model> model_;
};

TEST_P(KimiLinearParity, PromptLogitsMatchTransformers) {
  testing::Reference ref(dir_);
  ASSERT_GE(ref.n_prompts(), 5);
  for (int p = 0; p < ref.n_prompts(); ++p) {
    const auto ids = ref.ints("prompt_" + std::to_string(p));
    auto s = model::SequenceSession::create(*model_, 256);
    ASSERT_TRUE(s.ok());
    auto logits = s->feed(ids, 0, true);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    const float d = max_abs_diff(*logits, ref.floats("logits_" + std::to_string(p)));
    std::printf("%s prompt %d (%zu tokens): max |dlogit| = %.3g\n", GetParam().c_str(), p, ids.size(), d);
    EXPECT_LE(d, 1e-3f) << GetParam() << " prompt " << p << " (" << ids.size() << " tokens)";
  }
}

TEST_P(KimiLinearParity, GreedyContinuationsAndDecodeLogitsMatchTransformers) {
  testing::Reference ref(dir_);
  const int64_t V = model_->config().vocab_size;
  for (int p = 0; p < ref.n_prompts(); ++p) {
    const auto ids = ref.ints("prompt_" + std::to_string(p));
    const auto want = ref.ints("greedy_" + std::to_string(p));
    const auto want_logits = ref.floats("decode_logits_" + std::to_string(p));
    auto s = model::SequenceSession::create(*model_, 256);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s->feed(ids, 0, false).ok());
    std::vector<int32_t> got;
    for (size_t i = 0; i < want.size(); ++i) {
      auto next = s->sample(backend::SamplingRow{});  // temperature 0: greedy
      ASSERT_TRUE(next.ok());
      got.push_back(*next);
      const int32_t id = want[i];  // teacher-force the reference token so one slip does not cascade
      auto step = s->feed(std::span<const int32_t>(&id, 1), 1, false);
      ASSERT_TRUE(step.ok());
      std::vector<float> ref_row(want_logits.begin() + int64_t(i) * V, want_logits.begin() + int64_t(i + 1) * V);
      EXPECT_LE(max_abs_diff(*step, ref_row), 1e-3f) << GetParam() << " prompt " << p << " decode step " << i;
    }
    EXPECT_EQ(got, want) << GetParam() << " prompt " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KimiLinearParity, ::testing::ValuesIn(testing::kimi_linear_fixtures()));

}  // namespace
}  // namespace rill
