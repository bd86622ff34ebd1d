// Statistics against closed forms: for the shuffled arithmetic sequence a + b i (i = 0..n-1), numpy's linear
// percentile p is a + b p/100 (n - 1), the mean a + b (n - 1)/2, the population standard deviation
// |b| sqrt((n^2 - 1) / 12).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "bench/serve/latency_stats.h"
#include "test_seed.h"

namespace rill::bench::serve {
namespace {

TEST(LatencyStats, ArithmeticSequenceInAnyOrder) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 300)(rng);
    const double a = std::uniform_real_distribution<double>(-100, 100)(rng);
    const double b = std::uniform_real_distribution<double>(0.01, 10)(rng);
    std::vector<double> v;
    for (int i = 0; i < n; ++i) v.push_back(a + b * i);
    std::shuffle(v.begin(), v.end(), rng);
    SCOPED_TRACE(::testing::Message() << "n " << n << " a " << a << " b " << b);
    const double tol = 1e-9 * (std::abs(a) + b * n);
    for (double p : {0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0})
      EXPECT_NEAR(percentile(v, p), a + b * p / 100 * (n - 1), tol) << "p" << p;
    const LatencySummary s = summarize(v, {50, 99});
    EXPECT_NEAR(s.mean, a + b * (n - 1) / 2, tol);
    EXPECT_NEAR(s.median, a + b * (n - 1) / 2, tol);  // odd n: the middle value; even: the mean of the two
    EXPECT_NEAR(s.std, b * std::sqrt((double(n) * n - 1) / 12), tol);
    ASSERT_EQ(s.percentiles.size(), 2u);
    EXPECT_NEAR(s.percentiles[1], a + b * 0.99 * (n - 1), tol);
  }
}

TEST(LatencyStats, InterpolatesBetweenRanks) {
  // {10, 20, 30, 40}: rank of p99 = 0.99 * 3 = 2.97 -> 30 + 0.97 * 10 (numpy.percentile gives 39.7).
  EXPECT_DOUBLE_EQ(percentile({40, 10, 30, 20}, 99), 39.7);
  EXPECT_DOUBLE_EQ(percentile({40, 10, 30, 20}, 50), 25);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(LatencyStats, EmptyIsZero) {
  EXPECT_EQ(percentile({}, 99), 0);
  const LatencySummary s = summarize({}, {99});
  EXPECT_EQ(s.mean, 0);
  EXPECT_EQ(s.median, 0);
  EXPECT_EQ(s.percentiles, std::vector<double>{0});
}

}  // namespace
}  // namespace rill::bench::serve
