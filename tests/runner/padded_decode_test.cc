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

}  // namespace
}  // namespace rill::runner
