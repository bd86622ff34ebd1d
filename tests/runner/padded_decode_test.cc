// Decode and verify steps padded to their graph bucket (RunnerOptions::capture_graphs off: the padding and fixed inputs
// of decode graphs, run eagerly) against unpadded steps, on the CPU: the padding rows live in a state slot
// and an MLA block no sequence owns, so the real rows' logits and greedy tokens are those of the unpadded
// step, within fp32 summation-order noise. The schedule (decode_schedule.h) joins, leaves and interleaves
// prefill chunks.
#include <gtest/gtest.h>

#include "runner/decode_schedule.h"
#include "test_seed.h"

namespace rill::runner {
namespace {

// The CPU kernels' per-row results do not depend on the number of rows but for blocked sums (measured worst
// below 1e-6); a padding row that wrote a real sequence's slot or block would move its logits by order 1.
constexpr double kRelL2 = 1e-5;

TEST(PaddedDecode, PaddedStepsEqualUnpaddedOnesAsSequencesJoinLeaveAndPrefill) {
  auto be_p = std::move(backend::make_backend("cpu")).value();
  auto be_e = std::move(backend::make_backend("cpu")).value();
  auto padded = testing::make_schedule_runner(*be_p, false, false);
  auto eager = testing::make_schedule_runner(*be_e, true, false);
  ASSERT_TRUE(padded && eager);
  ASSERT_TRUE(padded->graphs_enabled());
  ASSERT_FALSE(eager->graphs_enabled());
  const uint64_t seed = rill::testing::test_seed();
  SCOPED_TRACE("RILL_TEST_SEED=" + std::to_string(seed));
  double worst = 0;
  const auto stats = testing::run_schedule(
      {eager.get(), padded.get()}, seed, [&](int step, bool, const std::vector<StepOutput>& o) {
        const size_t V = size_t(o[0].vocab);
        for (size_t r = 0; r < o[0].tokens.size(); ++r) {
          const double d = testing::rel_l2(std::span<const float>(o[1].logits).subspan(r * V, V),
                                           std::span<const float>(o[0].logits).subspan(r * V, V));
          worst = std::max(worst, d);
          EXPECT_LE(d, kRelL2) << "step " << step << " row " << r;
          EXPECT_EQ(o[1].tokens[r].id, o[0].tokens[r].id) << "step " << step << " row " << r;
        }
      });
  std::printf("[ padded ] %d steps, %zu decode buckets, worst rel-L2 vs unpadded %.2e\n", stats.steps,
              stats.decode_buckets.size(), worst);
  EXPECT_EQ(stats.decode_buckets.size(), decode_graph_buckets(testing::kMaxBatch).size());
  EXPECT_EQ(stats.verify_buckets.size(), 2 * decode_graph_buckets(testing::kMaxBatch).size());
  // Every decode-only and uniform verify step ran padded (the mixed verify step and the prefills did not).
  EXPECT_EQ(padded->graph_steps(), uint64_t(stats.graphable_steps));
  EXPECT_EQ(eager->graph_steps(), 0u);
}

// A step the backend runs faster eagerly (Backend::graph_max_expert_pairs: CUDA's cuBLAS grouped experts) gets
// no graph: the padded step's tokens (bucket x tokens per sequence) against the runner's limit.
TEST(DecodeGraphs, StepsAboveTheTokenLimitRunEagerly) {
  auto be = std::move(backend::make_backend("cpu")).value();
  auto m = model::load_model(rill::testing::data_dir() / "kimi_linear_tiny_b", *be);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto g = DecodeGraphs::create(*be, 16, 1024, 64, 0, 0, /*capture=*/false, /*max_tokens_per_seq=*/4,
                                /*max_step_tokens=*/8);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto step = [](int seqs, int q) {
    model::StepBatch b;
    for (int s = 0; s < seqs; ++s) {
      model::SequenceStep st;
      st.start_pos = 70;
      st.n_new = q;
      st.state_slot = 1 + s;
      st.block_table = {1 + 2 * s, 2 + 2 * s};
      if (q > 1) {
        st.logits = model::LogitsNeeded::LastN;
        st.n_logits = q;
      }
      b.seqs.push_back(st);
      b.token_ids.insert(b.token_ids.end(), size_t(q), 7);
    }
    return b;
  };
  EXPECT_EQ(g->bucket(**m, step(8, 1)), 8);
  EXPECT_EQ(g->bucket(**m, step(9, 1)), 0);  // bucket 16: 16 tokens
  EXPECT_EQ(g->bucket(**m, step(3, 2)), 4);
  EXPECT_EQ(g->bucket(**m, step(5, 2)), 0);  // bucket 8 x 2 tokens
  EXPECT_EQ(g->bucket(**m, step(2, 4)), 2);
  EXPECT_EQ(g->bucket(**m, step(1, 5)), 0);  // more tokens a sequence than the graphs were made for
  model::StepBatch mixed = step(2, 2);
  mixed.seqs[1].logits = model::LogitsNeeded::Last;  // not every row's logits: no graph
  EXPECT_EQ(g->bucket(**m, mixed), 0);
}

}  // namespace
}  // namespace rill::runner
