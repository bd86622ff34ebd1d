// The sampling rule (backend/sampling.h) against closed-form probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "backend/sampling.h"

namespace rill::backend {
namespace {

// Empirical frequencies of n draws with counters 0..n-1.
std::vector<double> frequencies(const std::vector<float>& logits, SamplingRow row, int n) {
  std::vector<double> f(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    row.counter = uint64_t(i);
    f[size_t(sample_row(logits.data(), int32_t(logits.size()), row))] += 1.0 / n;
  }
  return f;
}

TEST(Sampling, GreedyTakesTheFirstMaximum) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(sample_row(l.data(), 4, SamplingRow{}), 1);
  SamplingRow k1{1.0f, 1.0f, 0.0f, 1, 9, 0};  // top_k = 1 is greedy too
  EXPECT_EQ(sample_row(l.data(), 4, k1), 1);
}

TEST(Sampling, TemperatureFollowsTheSoftmax) {
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  const int n = 200000;
  auto f = frequencies(l, SamplingRow{1.0f, 1.0f, 0.0f, 0, 1234, 0}, n);
  for (size_t i = 0; i < 3; ++i) {
    const double p = std::exp(l[i]), sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(f[i], p, 5 * sigma) << i;
  }
  // T = 2 flattens: p_i ∝ p^(1/2).
  f = frequencies(l, SamplingRow{2.0f, 1.0f, 0.0f, 0, 99, 0}, n);
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  EXPECT_NEAR(f[0], std::sqrt(0.5) / z, 0.006);
  EXPECT_NEAR(f[2], std::sqrt(0.2) / z, 0.006);
}

TEST(Sampling, TopKTopPAndMinPTruncate) {
  const std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  const int n = 100000;
  auto f = frequencies(l, SamplingRow{1.0f, 1.0f, 0.0f, 2, 5, 0}, n);  // top-k 2: 4/7, 3/7
  EXPECT_NEAR(f[0], 4.0 / 7, 0.01);
  EXPECT_EQ(f[2] + f[3], 0.0);
  f = frequencies(l, SamplingRow{1.0f, 0.75f, 0.0f, 0, 6, 0}, n);  // top-p .75: {.4,.3,.2} reaches .9 >= .75 at 3rd
  EXPECT_GT(f[2], 0.0);
  EXPECT_EQ(f[3], 0.0);
  EXPECT_NEAR(f[1], 0.3 / 0.9, 0.01);
  f = frequencies(l, SamplingRow{1.0f, 1.0f, 0.6f, 0, 7, 0}, n);  // min-p .6 x .4 = .24 keeps {.4, .3}
  EXPECT_NEAR(f[0], 4.0 / 7, 0.01);
  EXPECT_EQ(f[2] + f[3], 0.0);
}

TEST(Sampling, SameSeedAndCounterSameToken) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(float(i));
  const SamplingRow r{0.8f, 0.95f, 0.0f, 50, 77, 3};
  EXPECT_EQ(sample_row(l.data(), 1000, r), sample_row(l.data(), 1000, r));
}

}  // namespace
}  // namespace rill::backend
