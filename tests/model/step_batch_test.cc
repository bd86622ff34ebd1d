// StepBatch's logits rows: which token rows each LogitsNeeded selects (closed-form), the checks on LastN, and
// that a model step asking for the last m positions returns exactly the last m rows of the same step asking
// for all of them (speculative decoding's verify step; its rows are selected before the lm_head, which is
// row-independent on the CPU, so the rows are bit-identical).
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "model/fixture.h"
#include "model/step_batch.h"
#include "test_seed.h"

namespace rill::model {
namespace {

SequenceStep step(int start, int n, LogitsNeeded logits, int n_logits = 0) {
  SequenceStep s;
  s.start_pos = start;
  s.n_new = n;
  s.logits = logits;
  s.n_logits = n_logits;
  s.block_table.assign(size_t((start + n + 63) / 64), 0);
  return s;
}

StepBatch batch(std::vector<SequenceStep> seqs) {
  StepBatch b;
  for (const SequenceStep& s : seqs) b.token_ids.insert(b.token_ids.end(), size_t(s.n_new), 1);
  b.seqs = std::move(seqs);
  return b;
}

TEST(StepBatch, LogitsRowsOfEachKind) {
  // Tokens 0-2 (None), 3-6 (Last), 7-8 (All), 9-13 (the last 3), 14 (LastN of its only token).
  const StepBatch b =
      batch({step(0, 3, LogitsNeeded::None), step(10, 4, LogitsNeeded::Last), step(5, 2, LogitsNeeded::All),
             step(20, 5, LogitsNeeded::LastN, 3), step(7, 1, LogitsNeeded::LastN, 1)});
  EXPECT_EQ(b.n_logit_rows(), 0 + 1 + 2 + 3 + 1);
  EXPECT_EQ(b.logit_token_rows(), (std::vector<int32_t>{6, 7, 8, 11, 12, 13, 14}));
  backend::BatchLayoutHost l;
  EXPECT_TRUE(b.to_layout(64, &l).ok());
}

TEST(StepBatch, LastNOfAllPositionsEqualsAll) {
  const StepBatch all = batch({step(0, 6, LogitsNeeded::All)}),
                  last6 = batch({step(0, 6, LogitsNeeded::LastN, 6)});
  EXPECT_EQ(all.logit_token_rows(), last6.logit_token_rows());
}

TEST(StepBatch, LastNOutsideTheSequenceIsRefused) {
  backend::BatchLayoutHost l;
  for (int m : {0, -1, 5}) {
    const Status st = batch({step(0, 4, LogitsNeeded::LastN, m)}).to_layout(64, &l);
    ASSERT_FALSE(st.ok()) << m;
    EXPECT_NE(st.message().find("logits of its last " + std::to_string(m) + " positions"), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("4 new tokens"), std::string::npos) << st.message();
  }
}

class StepBatchModel : public ::testing::TestWithParam<std::string> {};

TEST_P(StepBatchModel, LastNRowsAreTheTailOfAllRows) {
  auto be = backend::make_cpu_backend();
  auto m = load_model(testing::data_dir() / GetParam(), *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Model& model = **m;
  StepLimits lim;
  lim.max_tokens = 64;
  lim.max_seqs = 2;
  lim.max_logit_rows = 64;
  lim.max_context = 128;
  ASSERT_TRUE(model.reserve_workspace(lim).ok());
  const int64_t V = model.config().vocab_size;
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<int32_t> prompt(20), tail(6);
  for (auto& t : prompt) t = int32_t(3 + rng() % 500);
  for (auto& t : tail) t = int32_t(3 + rng() % 500);
  // Two identical sequences in their own slots: the prompt, then the same 6 tokens with All and LastN(m).
  auto caches = ModelCaches::allocate(*be, model.config(), 2, 4, 64);
  ASSERT_TRUE(caches.ok());
  auto run = [&](const std::vector<int32_t>& ids, int start, LogitsNeeded a, LogitsNeeded b, int m_b) {
    StepBatch s;
    for (int q = 0; q < 2; ++q) {
      SequenceStep st = step(start, int(ids.size()), q == 0 ? a : b, q == 0 ? 0 : m_b);
      st.state_slot = q;
      std::iota(st.block_table.begin(), st.block_table.end(), q * 2);
      s.seqs.push_back(st);
      s.token_ids.insert(s.token_ids.end(), ids.begin(), ids.end());
    }
    auto logits = model.forward(s, *caches);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    std::vector<float> host(size_t(logits->numel()));
    EXPECT_TRUE(be->copy_to_host(host.data(), logits->data, logits->nbytes()).ok());
    return host;
  };
  run(prompt, 0, LogitsNeeded::Last, LogitsNeeded::Last, 0);
  const int m_last = 1 + int(rng() % 6);
  SCOPED_TRACE("last " + std::to_string(m_last));
  const std::vector<float> out = run(tail, 20, LogitsNeeded::All, LogitsNeeded::LastN, m_last);
  ASSERT_EQ(out.size(), size_t(6 + m_last) * size_t(V));
  const std::vector<float> all(out.begin(), out.begin() + 6 * V), last(out.begin() + 6 * V, out.end());
  EXPECT_EQ(last, std::vector<float>(all.end() - m_last * V, all.end()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StepBatchModel, ::testing::Values("kimi_linear_tiny_a", "kimi_k3_tiny_a"));

}  // namespace
}  // namespace rill::model
