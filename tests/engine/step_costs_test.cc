// The measured break-even of speculative decoding (engine/spec/step_costs.h, BreakEvenRule::threshold): step
// costs as medians per (batch-size class, tokens per sequence), and the rule's a >= r - 1 in closed form.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "engine/spec/acceptance.h"
#include "engine/spec/step_costs.h"

namespace rill::engine {
namespace {

TEST(StepCosts, MedianOfTheLastWindowPerBatchClassAndTokens) {
  spec::StepCosts c(48);  // classes 1, 2, 4, 8, 16, 32, 48
  EXPECT_EQ(c.batch_class(1), 1);
  EXPECT_EQ(c.batch_class(3), 4);
  EXPECT_EQ(c.batch_class(33), 48);
  EXPECT_EQ(c.batch_class(48), 48);
  for (int i = 0; i < spec::StepCosts::kMinSamples - 1; ++i) c.record(3, 1, 1.0);
  EXPECT_FALSE(c.seconds(3, 1)) << "known before kMinSamples";
  c.record(4, 1, 9.0);  // the same class as 3 sequences; an outlier
  ASSERT_TRUE(c.seconds(3, 1));
  EXPECT_DOUBLE_EQ(*c.seconds(3, 1), 1.0);  // median of {1, 1, 1, 9}: (1 + 1) / 2
  EXPECT_FALSE(c.seconds(2, 1)) << "another class";
  EXPECT_FALSE(c.seconds(3, 5)) << "another token count";
  // Only the last kWindow samples count: after kWindow samples of 2.0, then 3.0 and 4.0 alternating.
  for (int i = 0; i < spec::StepCosts::kWindow; ++i) c.record(4, 5, 2.0);
  EXPECT_DOUBLE_EQ(*c.seconds(4, 5), 2.0);
  for (int i = 0; i < spec::StepCosts::kWindow; ++i) c.record(4, 5, i % 2 ? 4.0 : 3.0);
  EXPECT_DOUBLE_EQ(*c.seconds(4, 5), 3.5);  // an even window: the mean of its two middle samples
  c.record(4, 5, 10.0);                     // replaces the oldest 3.0: {3 x 7, 4 x 8, 10}
  EXPECT_DOUBLE_EQ(*c.seconds(4, 5), 4.0);
  ASSERT_TRUE(c.verify_ratio(3, 5));
  EXPECT_DOUBLE_EQ(*c.verify_ratio(3, 5), 4.0);
  EXPECT_FALSE(c.verify_ratio(3, 2)) << "no verify step of 2 tokens a sequence measured";
  c.record(4, 1, 0.0);  // not a time
  c.record(4, 1, -1.0);
  EXPECT_DOUBLE_EQ(*c.seconds(4, 1), 1.0);
}

TEST(BreakEvenRule, MeasuredThresholdIsTheCostRatioLessOne) {
  spec::BreakEvenRule rule;
  EXPECT_DOUBLE_EQ(rule.threshold(std::nullopt), rule.break_even);
  EXPECT_DOUBLE_EQ(rule.threshold(2.48), 1.48);  // the 48B shape's k = 4 verify step at batch 1 (H100)
  EXPECT_DOUBLE_EQ(rule.threshold(0.9), 0.0);    // a verify step measured cheaper: always pays
  rule.measured = false;
  EXPECT_DOUBLE_EQ(rule.threshold(2.48), rule.break_even);
  // AcceptanceAverage with a measured ratio: one accepted draft a step pays at r = 2, not at r = 2.5.
  spec::BreakEvenRule r{.min_steps = 2, .weight = 0.5};
  spec::AcceptanceAverage a, b;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(a.observe(1, r, 2.0));
    EXPECT_EQ(b.observe(1, r, 2.5), i + 1 < r.min_steps) << "step " << i;
  }
}

}  // namespace
}  // namespace rill::engine
