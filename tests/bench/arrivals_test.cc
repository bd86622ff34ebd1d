// The arrival process against the gamma distribution's closed-form moments: for n gaps of shape k and scale
// theta = 1 / (rate k), the sample mean has standard error theta sqrt(k / n) and the sample variance
// sqrt((2k^2 + 6k) / n) theta^2 (from the fourth central moment 3k(k + 2) theta^4); bounds are 6 of those.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/serve/arrivals.h"
#include "test_seed.h"

namespace rill::bench::serve {
namespace {

std::vector<double> gaps(const std::vector<double>& at) {
  std::vector<double> g;
  for (size_t i = 1; i < at.size(); ++i) g.push_back(at[i] - at[i - 1]);
  return g;
}

TEST(Arrivals, GapMomentsMatchTheGammaDistribution) {
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  constexpr int kRequests = 40001;
  for (double rate : {0.5, 4.0, 250.0}) {
    for (double k : {1.0, 0.5, 3.0}) {
      SCOPED_TRACE(::testing::Message() << "rate " << rate << " burstiness " << k);
      auto at = arrival_times(kRequests, rate, k, seed);
      ASSERT_TRUE(at.ok()) << at.status().to_string();
      ASSERT_EQ(at->size(), size_t(kRequests));
      EXPECT_EQ((*at)[0], 0.0);
      const std::vector<double> g = gaps(*at);
      const double n = double(g.size()), theta = 1.0 / (rate * k);
      double mean = 0, var = 0;
      for (double x : g) {
        ASSERT_GE(x, 0.0);
        mean += x / n;
      }
      for (double x : g) var += (x - mean) * (x - mean) / (n - 1);
      EXPECT_NEAR(mean, 1.0 / rate, 6 * theta * std::sqrt(k / n));
      EXPECT_NEAR(var, k * theta * theta, 6 * std::sqrt((2 * k * k + 6 * k) / n) * theta * theta);
    }
  }
}

TEST(Arrivals, PoissonGapsAreExponential) {
  // P(gap <= 1 / rate) = 1 - 1/e for exponential gaps; the count of such gaps is binomial.
  const uint32_t seed = testing::test_seed();
  SCOPED_TRACE(seed);
  auto at = arrival_times(20001, 8.0, 1.0, seed);
  ASSERT_TRUE(at.ok());
  const std::vector<double> g = gaps(*at);
  double below = 0;
  for (double x : g) below += x <= 1.0 / 8.0;
  const double p = 1 - std::exp(-1.0), n = double(g.size());
  EXPECT_NEAR(below / n, p, 6 * std::sqrt(p * (1 - p) / n));
}

TEST(Arrivals, InfiniteRateSendsEverythingAtOnce) {
  auto at = arrival_times(5, INFINITY, 1.0, 1);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(*at, std::vector<double>(5, 0.0));
}

TEST(Arrivals, TheSeedFixesTheSequence) {
  auto a = arrival_times(100, 3.0, 1.0, 7), b = arrival_times(100, 3.0, 1.0, 7),
       c = arrival_times(100, 3.0, 1.0, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
}

TEST(Arrivals, BadRatesAreNamed) {
  for (double bad : {0.0, -1.0, double(NAN)}) {
    auto at = arrival_times(3, bad, 1.0, 1);
    ASSERT_FALSE(at.ok());
    EXPECT_NE(at.status().message().find("--request-rate"), std::string::npos) << at.status().message();
  }
  auto at = arrival_times(3, 1.0, 0.0, 1);
  ASSERT_FALSE(at.ok());
  EXPECT_NE(at.status().message().find("--burstiness"), std::string::npos);
}

}  // namespace
}  // namespace rill::bench::serve
