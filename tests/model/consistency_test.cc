// The same tokens fed one-shot, in chunks and token by token give the same logits; a ragged batch mixing
// prefill chunks and decode steps gives each sequence exactly what it gets alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "model/fixture.h"
#include "model/ragged_batch.h"
#include "model/sequence_session.h"
#include "test_seed.h"

namespace rill {
namespace {

using testing::max_abs_diff;

std::unique_ptr<model::Model> load(backend::Backend& be, const std::string& name) {
  return testing::load_fixture_model(testing::data_dir() / name, be);
}

class Consistency : public ::testing::TestWithParam<std::string> {};

TEST_P(Consistency, ChunkedOneShotAndTokenByTokenAgree) {
  auto be = backend::make_cpu_backend();
  auto model = load(*be, GetParam());
  testing::Reference ref(testing::data_dir() / GetParam());
  const auto ids = ref.ints("prompt_4");  // 160 tokens: two full KDA chunks and a partial one
  ASSERT_GE(ids.size(), 150u);
  auto run = [&](int chunk) {
    auto s = model::SequenceSession::create(*model, 512);
    EXPECT_TRUE(s.ok());
    auto logits = s->feed(ids, chunk, true);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    return *logits;
  };
  const std::vector<float> one_shot = run(0);
  for (int chunk : {1, 3, 16, 64, 100}) {
    EXPECT_LE(max_abs_diff(run(chunk), one_shot), 1e-4f) << "chunk " << chunk;
  }
}

// A scheduled step: which sequence gets how many new tokens.

TEST_P(Consistency, RaggedBatchEqualsSequencesAlone) {
  auto be = backend::make_cpu_backend();
  auto model = load(*be, GetParam());
  const int64_t V = model->config().vocab_size;
  const uint32_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<int> lengths = {150, 7, 70, 33};
  std::vector<std::vector<int32_t>> tokens;
  for (int n : lengths) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(rng() % uint32_t(V));
    tokens.push_back(t);
  }
  // A schedule mixing long prefill chunks, short chunks and single decode-like tokens in the same steps.
  const std::vector<std::vector<testing::RaggedPiece>> steps = {
      {{0, 40}, {1, 3}},
      {{0, 64}, {1, 1}, {2, 50}},
      {{1, 1}, {2, 20}, {3, 33}, {0, 10}},
      {{0, 36}, {1, 1}, {3, 0}},
      {{1, 1}},
  };
  testing::expect_ragged_batch_equals_alone(*be, *model, tokens, steps);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Consistency, ::testing::ValuesIn(testing::kimi_linear_fixtures()));

}  // namespace
}  // namespace rill
